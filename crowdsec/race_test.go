//go:build race

package crowdsec

// raceDetector: timings are not asserted under the race detector, which
// slows decoding several times over.
const raceDetector = true

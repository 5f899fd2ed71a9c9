//go:build !race

package crowdsec

const raceDetector = false

package maps

// BytesOf is bytesOf for the external tests: a slice of n zeroed values of
// size bytes, the shape the batch calls take.
var BytesOf = bytesOf

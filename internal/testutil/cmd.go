package testutil

import "github.com/xdplimit/xdplimit/internal/command"

// RunTimeout is command.Run, kept here so that tests find every helper in
// one package.
var RunTimeout = command.Run

// ErrTimeout is wrapped by RunTimeout's error when the command was killed.
var ErrTimeout = command.ErrTimeout

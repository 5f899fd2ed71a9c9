// SPDX-License-Identifier: Apache-2.0

package netns

// Create makes a namespace with an exact name, for tests of CleanupStale
// that need a name New would not choose.
var Create = create

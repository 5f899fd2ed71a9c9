// SPDX-License-Identifier: Apache-2.0

// Package packaging holds what `make dist` needs besides the code: the nfpm
// configuration of the .deb, its maintainer scripts, copyright file and
// example policy, and the Debian version scheme (deb-version.sh). Its tests
// build the package with make dist, check it, install it and purge it.
package packaging

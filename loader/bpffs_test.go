// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"fmt"
	"testing"
)

func TestCheckInterfaceName(t *testing.T) {
	for _, c := range []struct{ name, err string }{
		{"eth0", ""},
		{"veth-a.100", ""},
		{"fifteen-chars-x", ""},
		{"", `interface name "": empty`},
		{"sixteen-chars-xx", `interface name "sixteen-chars-xx": longer than 15 bytes`},
		{".", `interface name ".": not a name`},
		{"..", `interface name "..": not a name`},
		{"../eth0", `interface name "../eth0": holds '/', ':' or white space`},
		{"eth0:1", `interface name "eth0:1": holds '/', ':' or white space`},
		{"eth 0", `interface name "eth 0": holds '/', ':' or white space`},
	} {
		err := CheckInterfaceName(c.name)
		if got := fmt.Sprint(err); (c.err == "" && err != nil) || (c.err != "" && got != c.err) {
			t.Errorf("CheckInterfaceName(%q) = %v, want %q", c.name, err, c.err)
		}
	}
	// Every entry point refuses before touching bpffs or the lock
	// directory. Detach gets a name that would be harmless unchecked.
	for _, c := range []struct {
		name string
		err  error
	}{
		{"xdpl-none/x", Detach("xdpl-none/x")},
		{"..", func() error { _, err := Open(".."); return err }()},
		{"..", func() error { _, err := Attach(Config{Interface: ".."}); return err }()},
	} {
		if want := CheckInterfaceName(c.name); c.err == nil || want == nil || c.err.Error() != want.Error() {
			t.Errorf("%q: got %v, want %v", c.name, c.err, want)
		}
	}
}

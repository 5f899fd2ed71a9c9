package main

import "testing"

func TestStatusRefuses(t *testing.T) {
	cases := []cliCase{
		refused("two interfaces", "accepts at most 1 arg(s), received 2", "status", noIface, "eth9"),
		refused("not attached", notAttached(t), "status", noIface),
		refused("flag value", `invalid argument "maybe" for "--count-sources" flag: strconv.ParseBool: parsing "maybe": invalid syntax`,
			"status", noIface, "--count-sources=maybe"),
	}
	runCases(t, append(cases, badNameCases("status")...))
}

// SPDX-License-Identifier: Apache-2.0

// Package crowdsec is a CrowdSec bouncer: a client of the Local API's
// decision stream (GET /v1/decisions/stream, as crowdsec 1.4.6 serves it)
// that applies ban decisions on IP addresses and ranges to xdplimit's ban
// table. It is written on net/http: the official Go bouncer library is not
// available here.
//
// The Bouncer speaks the protocol: it polls, resynchronises after
// failures, bounds what it reads, and passes on only configured types, the
// scopes Ip and Range with values parsed strictly, and what the origin and
// scenario filters admit; bad input is counted and logged once per kind
// per poll. Its Target decides what the ban table takes: Table, the
// daemon's, passes every decision through banfeed's gate (the policy's
// bans: limits, escaped origins) as every ban from outside does.
package crowdsec

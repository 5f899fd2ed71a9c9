// Package crowdsec is a CrowdSec bouncer: a client of the Local API's
// decision stream (GET /v1/decisions/stream, as crowdsec 1.4.6 serves it)
// that applies ban decisions on IP addresses and ranges through a Target,
// the daemon's ban table. It is written on net/http: the official Go
// bouncer library is not available here.
//
// What reaches the Target is checked first: only configured types and the
// scopes Ip and Range; addresses parsed strictly, IPv4-mapped IPv6 made
// IPv4, ranges wider than a per-family minimum (/8, /32) never applied;
// durations positive and clamped; origins and reasons bounded printable
// ASCII. Bad input is counted and logged once per kind per poll, and a
// failing Target call skips one decision, never the batch. See Bouncer for
// the resynchronisation rules.
package crowdsec

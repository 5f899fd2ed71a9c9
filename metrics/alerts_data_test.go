// SPDX-License-Identifier: Apache-2.0

package metrics

// alertTests are promtool's unit tests of the alerts on synthetic series,
// the rule file's path left to fill in: each alert fires on the condition
// it is for, and only then.
const alertTests = `rule_files: [%q]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # 600 drops/min = 10/s: below the sustained-drops threshold.
      - series: 'xdplimit_packets_total{instance="h1",interface="eth0",rule="dns",verdict="drop"}'
        values: '0+600x40'
      # 12000/min = 200/s: above it.
      - series: 'xdplimit_packets_total{instance="h1",interface="eth0",rule="_deny",verdict="drop"}'
        values: '0+12000x40'
      - series: 'xdplimit_packets_total{instance="h1",interface="eth0",rule="dns",verdict="pass"}'
        values: '0+60000x40'
      - series: 'xdplimit_up{instance="h1",interface="eth0"}'
        values: '1 1 0 0 0 0 0'
      - series: 'xdplimit_tracked_sources{instance="h1",interface="eth0"}'
        values: '1000000x40'
      - series: 'xdplimit_source_table_capacity{instance="h1",interface="eth0"}'
        values: '1048576x40'
      - series: 'xdplimit_source_table_evictions_total{instance="h1",interface="eth0"}'
        values: '0+100x40'
      - series: 'xdplimit_source_table_insert_failures_total{instance="h1",interface="eth0"}'
        values: '0x10 3x30'
      - series: 'xdplimit_policy_reloads_total{instance="h1",interface="eth0",result="failure"}'
        values: '0x10 1x30'
      - series: 'xdplimit_policy_reloads_total{instance="h1",interface="eth0",result="success"}'
        values: '0x10 0x30'
      # 120000/min = 2000 SYNs/s answered with cookies: a flood.
      - series: 'xdplimit_packets_total{instance="h1",interface="eth0",rule="web-syn",verdict="syncookie"}'
        values: '0+120000x40'
      # 600/min = 10/s: a trickle, no flood.
      - series: 'xdplimit_packets_total{instance="h1",interface="eth0",rule="ssh-syn",verdict="syncookie"}'
        values: '0+600x40'
      # Cookie ACKs: 10/s valid, 1000/s invalid for web-syn (an ACK flood);
      # only invalid ones at ssh-syn, but 1/s.
      - series: 'xdplimit_syncookie_acks_total{instance="h1",interface="eth0",rule="web-syn",result="valid"}'
        values: '0+600x40'
      - series: 'xdplimit_syncookie_acks_total{instance="h1",interface="eth0",rule="web-syn",result="invalid"}'
        values: '0+60000x40'
      - series: 'xdplimit_syncookie_acks_total{instance="h1",interface="eth0",rule="ssh-syn",result="invalid"}'
        values: '0+60x40'
      # 120000/min = 2000/s forged ACKs dropped; a trickle of datagrams to
      # closed ports, 5/s; and a check in shadow counting 10/s.
      - series: 'xdplimit_packets_total{instance="h1",interface="eth0",rule="_no_connection",verdict="drop"}'
        values: '0+120000x40'
      - series: 'xdplimit_packets_total{instance="h1",interface="eth0",rule="_no_socket",verdict="drop"}'
        values: '0+300x40'
      - series: 'xdplimit_packets_total{instance="h1",interface="eth0",rule="_no_socket",verdict="shadow_drop"}'
        values: '0+600x40'
      # The autopilot: an attack in progress from 10m; its first no_rule
      # at 10m (a new series, starting at 1), another at 25m.
      - series: 'xdplimit_autopilot_attacks_active{instance="h1",interface="eth0"}'
        values: '0x10 1x30'
      - series: 'xdplimit_autopilot_decisions_total{instance="h1",interface="eth0",decision="no_rule"}'
        values: '_x10 1x14 2x16'
    alert_rule_test:
      - eval_time: 4m
        alertname: XdplimitConversationFlood
        exp_alerts: []
      - eval_time: 20m
        alertname: XdplimitConversationFlood
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0, rule: _no_connection}
            exp_annotations:
              summary: "xdplimit drops 2k packets/s on eth0 that belong to no conversation (_no_connection)"
              description: "` + convFloodRunbook + `"
      - eval_time: 30m
        alertname: XdplimitConversationShadowHits
        exp_alerts: []
      - eval_time: 40m
        alertname: XdplimitConversationShadowHits
        exp_alerts:
          - exp_labels: {severity: info, instance: h1, interface: eth0, rule: _no_socket}
            exp_annotations:
              summary: "a conversation check in shadow on eth0 would drop 10 packets/s (_no_socket)"
              description: "` + convShadowRunbook + `"
      - eval_time: 5m
        alertname: XdplimitMapsUnreadable
        exp_alerts:
          - exp_labels: {severity: critical, instance: h1, interface: eth0}
            exp_annotations:
              summary: "xdplimit on h1 eth0 cannot read its BPF maps"
              description: "See /healthz on the exporter for the reason. Enforcement may have stopped."
      - eval_time: 20m
        alertname: XdplimitSustainedDrops
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0, rule: _deny}
            exp_annotations:
              summary: "xdplimit drops 200 packets/s on eth0 (rule _deny)"
              description: "Sustained drops for 10 minutes on h1. Check ` + "`xdplimit top eth0`" + `: an attack, or a limit below legitimate traffic."
      - eval_time: 5m
        alertname: XdplimitSustainedDrops
        exp_alerts: []
      - eval_time: 20m
        alertname: XdplimitSourceTableNearFull
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0}
            exp_annotations:
              summary: "xdplimit source table on eth0 is 95.37%% full and evicting"
              description: "Evicted sources lose their state and get a fresh burst: a spoofed flood can wash out real limits. Raise --max-sources."
      - eval_time: 9m
        alertname: XdplimitSourceInsertFailures
        exp_alerts: []
      - eval_time: 12m
        alertname: XdplimitSourceInsertFailures
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0}
            exp_annotations:
              summary: "xdplimit on eth0 dropped 3 packets in 5m: their sources could not be tracked"
      - eval_time: 9m
        alertname: XdplimitPolicyReloadFailed
        exp_alerts: []
      - eval_time: 12m
        alertname: XdplimitPolicyReloadFailed
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0, result: failure}
            exp_annotations:
              summary: "xdplimit policy reload failed on h1 eth0"
              description: "The previous policy stays in force. See the attach logs (journalctl -u xdplimit@eth0)."
      - eval_time: 30m
        alertname: XdplimitPolicyReloadFailed
        exp_alerts: []
      - eval_time: 10m
        alertname: XdplimitAutopilotAttack
        exp_alerts: []
      - eval_time: 12m
        alertname: XdplimitAutopilotAttack
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0}
            exp_annotations:
              summary: "xdplimit autopilot on h1 eth0: 1 attack(s) in progress"
              description: "` + autopilotAttackRunbook + `"
      - eval_time: 9m
        alertname: XdplimitAutopilotNoRule
        exp_alerts: []
      - eval_time: 12m
        alertname: XdplimitAutopilotNoRule
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0, decision: no_rule}
            exp_annotations:
              summary: "the xdplimit autopilot on h1 eth0 wrote no rule for an attack"
              description: "` + autopilotNoRuleRunbook + `"
      - eval_time: 20m
        alertname: XdplimitAutopilotNoRule
        exp_alerts: []
      - eval_time: 27m
        alertname: XdplimitAutopilotNoRule
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0, decision: no_rule}
            exp_annotations:
              summary: "the xdplimit autopilot on h1 eth0 wrote no rule for an attack"
              description: "` + autopilotNoRuleRunbook + `"
      - eval_time: 4m
        alertname: XdplimitSynFloodAnswered
        exp_alerts: []
      - eval_time: 20m
        alertname: XdplimitSynFloodAnswered
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0, rule: web-syn}
            exp_annotations:
              summary: "xdplimit answers 2k SYNs/s with cookies on eth0 (rule web-syn)"
              description: "` + synFloodRunbook + `"
      - eval_time: 4m
        alertname: XdplimitInvalidCookieAcks
        exp_alerts: []
      - eval_time: 20m
        alertname: XdplimitInvalidCookieAcks
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0, rule: web-syn}
            exp_annotations:
              summary: "99.01%% of the cookie ACKs on eth0 (rule web-syn) are invalid"
              description: "` + ackFloodRunbook + `"
`

// The SYN cookie alerts' descriptions as promtool renders them for h1 eth0,
// escaped for a YAML double-quoted string.
const (
	synFloodRunbook = `A SYN flood on h1 eth0 has been answered from XDP for 5 minutes: ` +
		`SYNs over rule web-syn's limit get a SYN-ACK carrying a SYN cookie and never reach the ` +
		`listener. What to check: real clients still connect (xdplimit_syncookie_acks_total{result=\"valid\"} ` +
		`near its usual rate; ` + "`xdplimit status eth0`" + `); where the flood comes from ` +
		`(` + "`xdplimit top eth0`" + `, the drop log's syncookie lines); the uplink, which sends one ` +
		`SYN-ACK back per SYN: if it saturates, have the flood filtered upstream. Nothing to do on the host ` +
		`while the valid ACKs keep up.`
	ackFloodRunbook = `ACKs to a listening port on h1 carry wrong SYN cookies and are dropped in XDP ` +
		`(the drop log's bad_cookie lines): an ACK flood against a port rule web-syn answers ` +
		`SYNs for, or clients answering SYN-ACKs minutes late. They never reach the listener, and cost a ` +
		`socket lookup and a cookie check each. If their rate grows, limit ACKs to the port with a rule of ` +
		`their own (tcp_flags: [ack], docs/policy.md \"SYN cookies\"), and have the flood filtered upstream.`
	convFloodRunbook = `A flood on h1 eth0 of packets addressed to the host that its sockets would ` +
		`not receive (_no_connection: TCP segments of no connection, or UDP to closed ports) has been dropped in ` +
		`XDP for 5 minutes; the stack sends no resets or port unreachables for them. What to check: where it ` +
		`comes from (` + "`xdplimit top eth0`" + `, the drop log's no_connection and no_socket lines); ` +
		`the uplink, if the flood saturates it: have it filtered upstream. Nothing to do on the host.`
	autopilotAttackRunbook = `Run ` + "`xdplimit autopilot list eth0`" + ` on h1: the destinations under ` +
		`attack, the rules written for them with their fingerprints and evidence (the share of normal traffic ` +
		`they match), or why an attack got none. Keep a rule that should stay (` + "`xdplimit autopilot keep`" + `), remove ` +
		`one that matches real clients (` + "`xdplimit autopilot remove`" + `); docs/autopilot.md.`
	autopilotNoRuleRunbook = `The attack is not held by a generated rule. The attach log's ` + "`autopilot: no rule`" + ` line says why ` +
		`(journalctl -u xdplimit@eth0 | grep 'autopilot: no rule'), and ` +
		"`xdplimit autopilot list eth0`" + ` shows it beside the attack: no trait of its own, only ` +
		`traits rules cannot match, max_rules reached, or too little normal traffic seen. What to do for each: ` +
		`docs/autopilot.md, \"When it gets it wrong\".`
	convShadowRunbook = `For 30 minutes the check would have dropped packets on h1 eth0 that ` +
		`its sockets do not receive. Outside an attack these are real traffic the check cannot see a socket ` +
		`for: a port published by DNAT, a service in another network namespace (docs/conversations.md). The ` +
		`drop log's shadow lines name their destinations; do not enforce the check until they are explained.`
)

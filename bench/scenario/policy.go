package scenario

import _ "embed"

// FailoverPolicyName is the routing policy of scenarios with a failover
// section; troupe bench writes FailoverPolicy as NAME.lua into the
// gateway's policy directory.
const FailoverPolicyName = "bench_failover"

// FailoverPolicy is the Lua source of FailoverPolicyName: round_robin
// (every usable account in turn, least recently granted first) with the
// account priority as the first tie-break, so that the failing accounts of
// a failover group (priority 1) are tried before its healthy one.
//
//go:embed bench_failover.lua
var FailoverPolicy string

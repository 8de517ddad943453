// Package ctrl owns a control plane for jobs of 10 000 ranks and more: the
// connections, the bootstrap table, the collectives and the liveness of
// the ranks of one job, with no rank holding a link to every other. It is
// built to replace engine/mesh's full mesh, with the same semantics
// (collectives that fail naming the ranks concerned, ErrPeerDead, OnDead,
// abort notices), and does not depend on it.
//
// Topology (topo.go, pure functions): the ranks of a node reach their node
// agent (local rank 0) over one unix socket each; agents form a k-ary tree
// (Arity, default 16) with ring links, and connect on first use to their
// recursive-doubling partners for collectives. A plain rank holds one
// control connection; an agent holds its local ranks, its tree parent and
// children, two ring neighbours and about log2(nodes) partners.
//
// Bootstrap (Start): every rank's blob goes up the tree, the root lays
// out one table and sends it down; each agent keeps it in a memfd that
// its local ranks map (one copy per node). Every wait has a deadline whose
// error names the missing ranks; an agent runs at most MaxAccepts
// handshakes at once.
//
// Collectives (coll.go): Barrier, Broadcast, AllGather and
// AllReduceFloat32 reduce inside the node at the agent, then among agents
// by recursive doubling (small messages) or recursive halving and doubling
// (large ones, Rabenseifner), with the excess nodes folded for any count.
// Every sum has one fixed order, so results are bit-identical on every
// rank. AllReduceRingOrder (ring.go, the store's all-reduce) sums in
// engine/mesh's ring order instead: on one node through the node's memfd
// scratch, across nodes by a gather for small vectors and, for large ones,
// a pipelined ring of agents that add their ranks in rank order.
//
// Liveness (live.go): each agent pings its ring successor every Period;
// a successor silent for SuspectAfter is probed indirectly through Probes
// other agents (SWIM), and declared dead (its whole node) after DeadAfter
// unless one of them got an answer. A local rank is watched by its agent:
// its socket's EOF is its death, and silence after LocalDeadAfter and one
// of its beats (LocalTiming) too. A death floods over the agents' links
// and down to every local rank; every collective then fails naming it,
// but for those in which the dead rank had done its part (its part came
// up, its result was ready to go down): as under engine/mesh, a rank that
// exits after its last collective without closing (os.Exit, the end of
// main) is no failure of the ranks still finishing that collective. An
// agent whose connections end is dead for the collectives after the one
// its finder was in; up to that one, only a rank that waits for its part
// fails (no link from its node left), and tells the others (an abort).
package ctrl

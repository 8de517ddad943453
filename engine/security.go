package engine

// Secret says where the job's secret came from, the one every control
// connection of this store proved it knows (README "Security"): "launcher"
// (rank 0's random one through PMI or the directory), "env"
// (DDSTORE_TOKEN, which ddrun sets), "tokenfile", "option", "insecure"
// (none, by explicit choice), or "" for a one-rank job.
func (s *Store) Secret() string { return s.secretSrc }

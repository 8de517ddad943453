package telemetry

import (
	"fmt"
	"strings"
)

// Finding is one diagnosis in the form ddtop's rules (ui/diagnose) and the
// doctor's probes (engine/doctor) share: the rule, where it shows, the
// numbers that show it against the threshold they crossed, and the fix
// with its config key and environment variable.
type Finding struct {
	Rule     string  `json:"rule"`
	Severity float64 `json:"severity"` // how bad: findings sort worst (highest) first
	Job      string  `json:"job,omitempty"`
	Rank     int     `json:"rank"` // -1: the whole job
	Host     string  `json:"host,omitempty"`
	Var      string  `json:"var,omitempty"`
	Reader   int     `json:"reader"` // -1: not one reader
	Evidence string  `json:"evidence"`
	Fix      string  `json:"fix"`
	Key      string  `json:"config_key,omitempty"` // config file key of the fix
	Env      string  `json:"env,omitempty"`        // environment setting of the fix
}

// String is the finding on one line: rule, where, evidence, fix.
func (f Finding) String() string {
	return f.Rule + " " + f.Where() + ": " + f.Evidence + " → " + f.Fix
}

// Where names the place: rank (and host), variable, reader.
func (f Finding) Where() string {
	var parts []string
	if f.Rank >= 0 {
		p := fmt.Sprintf("rank %d", f.Rank)
		if f.Host != "" {
			p += " (" + f.Host + ")"
		}
		parts = append(parts, p)
	} else if f.Job != "" {
		parts = append(parts, "job "+f.Job)
	}
	if f.Var != "" {
		parts = append(parts, "var "+f.Var)
	}
	if f.Reader >= 0 {
		parts = append(parts, fmt.Sprintf("reader %d", f.Reader))
	}
	return strings.Join(parts, " ")
}

// Package configs holds the per-machine YAML configuration files of ddstore
// (local, frontier, perlmutter) and embeds them, so that a laptop needs no
// file: engine.LoadConfig falls back to Default (local.yaml), and picks
// frontier.yaml or perlmutter.yaml from FS when it detects those machines.
package configs

import "embed"

// FS holds every *.yaml file of this directory.
//
//go:embed *.yaml
var FS embed.FS

// Default is local.yaml: the configuration used when nothing else is given.
//
//go:embed local.yaml
var Default []byte

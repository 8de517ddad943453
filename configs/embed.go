// Package configs owns ddstore's configuration: the schema (Config, one
// section per part, ddtop's included), its one loader (Load: viper, YAML
// plus DDSTORE_* environment overrides), every DDSTORE_* name and the one
// place that reads them (Load, ReadOverrides, ReadLaunch: no other package
// does, TestOnlyConfigsReadsTheEnvironment checks it), the one boolean
// syntax (ParseBool), and the per-machine YAML files (local, frontier,
// perlmutter), embedded so that a laptop needs no file and
// `--config frontier` works from any directory. Load falls back to Default
// (local.yaml), and picks frontier.yaml or perlmutter.yaml from FS when it
// detects those machines. The engine maps a Config onto its option
// structs; ddtop reads its telemetry and ddtop sections.
//
// The package imports nothing of ddstore's, so ddtop builds without the
// engine or libfabric.
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

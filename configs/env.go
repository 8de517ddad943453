package configs

// The environment variables that are not keys of the config file, and the
// ones Open honours when its caller built Options by hand (no Load). This
// file and load.go are the only places in ddstore that read a DDSTORE_*
// variable (TestOnlyConfigsReadsTheEnvironment checks it); the engine and
// the bootstrap ask here, typed.

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Names of the variables that describe a launch rather than a machine.
const (
	EnvConfig        = "DDSTORE_CONFIG"        // the config file or embedded machine (Load)
	EnvJob           = "DDSTORE_JOB"           // the job id that names shard and telemetry files
	EnvJobToken      = "DDSTORE_JOB_TOKEN"     // the token every rank of a job shares
	EnvRole          = "DDSTORE_ROLE"          // "storage" for storage-only ranks
	EnvStorageJob    = "DDSTORE_STORAGE_JOB"   // the name both launches of a storage job give
	EnvStorageToken  = "DDSTORE_STORAGE_TOKEN" // their token (default: the name)
	EnvStorageAddr   = "DDSTORE_STORAGE_ADDR"  // host:port of the join rendezvous
	EnvStorageData   = "DDSTORE_STORAGE_DATA"  // storage ranks: the shard files' directory
	EnvStorageRanks  = "DDSTORE_STORAGE_RANKS" // how many storage ranks
	EnvStorageTrains = "DDSTORE_STORAGE_TRAINERS"
	EnvStorageWidth  = "DDSTORE_STORAGE_WIDTH"
	EnvLaunchNS      = "DDSTORE_LAUNCH_NS"  // the launcher's start time, ns since the epoch (examples/opentime)
	EnvToken         = "DDSTORE_TOKEN"      // the job's secret (≥ 16 bytes) that every control connection proves
	EnvTokenFile     = "DDSTORE_TOKEN_FILE" // the token file (default ~/.ddstore/token)
	EnvInsecure      = "DDSTORE_INSECURE"   // true: run without a secret (warned); only an explicit setting
)

// Launch is what the environment says about this launch: the job, and
// for storage-only ranks the join. Unset variables leave zero values.
type Launch struct {
	Job, JobToken string
	// BootstrapAddr and BootstrapDir: the rendezvous, as
	// bootstrap.addr/bootstrap.dir (DDSTORE_BOOTSTRAP_ADDR, _DIR) say.
	BootstrapAddr, BootstrapDir string
	Role                        string
	Storage                     StorageLaunch
	// Token (DDSTORE_TOKEN) is the job's secret, TokenFile
	// (DDSTORE_TOKEN_FILE) where to keep one, Insecure (DDSTORE_INSECURE)
	// the explicit choice to run without (engine/bootstrap, secret.go).
	Token, TokenFile string
	Insecure         bool
}

// StorageLaunch is the storage join's part of Launch.
type StorageLaunch struct {
	Job, Token, Addr, Data          string
	Ranks, Trainers, Width          int
	RanksSet, TrainersSet, WidthSet bool // the counts were given
}

// ReadLaunch reads the launch's variables. A count that is not a whole
// number ≥ 0 is an error wrapping ErrConfig that names the variable.
func ReadLaunch() (Launch, error) {
	l := Launch{
		Job: env(EnvJob), JobToken: env(EnvJobToken), Role: env(EnvRole),
		BootstrapAddr: env(envOf("bootstrap.addr")), BootstrapDir: env(envOf("bootstrap.dir")),
		Storage: StorageLaunch{Job: env(EnvStorageJob), Token: env(EnvStorageToken), Addr: env(EnvStorageAddr), Data: env(EnvStorageData)},
	}
	l.Token, l.TokenFile = env(EnvToken), env(EnvTokenFile)
	var errs []error
	if v := env(EnvInsecure); v != "" {
		b, err := ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: environment variable %s=%q: want 1/0, true/false, yes/no or on/off", ErrConfig, EnvInsecure, v))
		}
		l.Insecure = b
	}
	count := func(name string, dst *int, set *bool) {
		v := strings.TrimSpace(os.Getenv(name))
		if v == "" {
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("%w: environment variable %s=%q: want a count ≥ 0", ErrConfig, name, v))
			return
		}
		*dst, *set = n, true
	}
	st := &l.Storage
	count(EnvStorageRanks, &st.Ranks, &st.RanksSet)
	count(EnvStorageTrains, &st.Trainers, &st.TrainersSet)
	count(EnvStorageWidth, &st.Width, &st.WidthSet)
	return l, errors.Join(errs...)
}

// LookupJob is DDSTORE_JOB through look (the bootstrap's environment
// lookup, which its tests replace).
func LookupJob(look func(string) (string, bool)) (string, bool) { return look(EnvJob) }

// LaunchNanos is DDSTORE_LAUNCH_NS, 0 when unset or not a positive number.
func LaunchNanos() int64 {
	v, err := strconv.ParseInt(os.Getenv(EnvLaunchNS), 10, 64)
	if err != nil || v <= 0 {
		return 0
	}
	return v
}

// Overrides are the config keys' variables that Open applies to Options
// its caller built by hand: a Config from Load has them already.
type Overrides struct {
	Telemetry, Profile *bool  // telemetry.enabled, profile; nil: unset
	TelemetryDir       string // telemetry.dir
	Fabric, Iface      string // fabric.provider, fabric.iface
	// Control is store.control (DDSTORE_CONTROL), checked by CheckControl;
	// the tree's timings store.ctrl_* (zero: unset).
	Control                                     string
	CtrlPeriod, CtrlSuspectAfter, CtrlDeadAfter time.Duration
}

// ReadOverrides reads the Overrides. A boolean that ParseBool refuses is an
// error wrapping ErrConfig that names the variable.
func ReadOverrides() (Overrides, error) {
	var o Overrides
	var errs []error
	boolean := func(key string) *bool {
		name := envOf(key)
		v := strings.TrimSpace(os.Getenv(name))
		if v == "" {
			return nil
		}
		b, err := ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: environment variable %s=%q: want 1/0, true/false, yes/no or on/off", ErrConfig, name, v))
			return nil
		}
		return &b
	}
	o.Telemetry = boolean("telemetry.enabled")
	o.Profile = boolean("profile")
	o.TelemetryDir = env(envOf("telemetry.dir"))
	o.Fabric = env(envOf("fabric.provider"))
	o.Iface = env(envOf("fabric.iface"))
	o.Control = env(envOf("store.control"))
	if err := CheckControl(o.Control); o.Control != "" && err != nil {
		errs = append(errs, fmt.Errorf("%w: environment variable %s=%q: %v", ErrConfig, envOf("store.control"), o.Control, err))
	}
	duration := func(key string, dst *time.Duration) {
		name := envOf(key)
		if v := env(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("%w: environment variable %s=%q: want a positive duration such as 1s", ErrConfig, name, v))
				return
			}
			*dst = d
		}
	}
	duration("store.ctrl_period", &o.CtrlPeriod)
	duration("store.ctrl_suspect_after", &o.CtrlSuspectAfter)
	duration("store.ctrl_dead_after", &o.CtrlDeadAfter)
	return o, errors.Join(errs...)
}

// Control planes (store.control).
const (
	ControlMesh = "mesh"
	ControlTree = "tree"
)

// DefaultControl is the control plane of "" (store.control).
const DefaultControl = ControlTree

// CheckControl: "" (the default, tree), "mesh" or "tree".
func CheckControl(v string) error {
	switch v {
	case "", ControlMesh, ControlTree:
		return nil
	}
	return fmt.Errorf("%q is not mesh or tree", v)
}

// CheckCtrlTiming: the tree's liveness timings must grow (period <
// suspect-after < dead-after); zero ones take their defaults and are not
// compared.
func CheckCtrlTiming(period, suspect, dead time.Duration) error {
	if period < 0 || suspect < 0 || dead < 0 {
		return fmt.Errorf("negative duration")
	}
	if period > 0 && suspect > 0 && suspect < period || suspect > 0 && dead > 0 && dead <= suspect {
		return fmt.Errorf("must grow: period %v, suspect after %v, dead after %v", period, suspect, dead)
	}
	return nil
}

// envOf is the environment variable of config key k (the keys table).
func envOf(k string) string {
	for _, x := range keys {
		if x.key == k {
			return x.env
		}
	}
	panic("configs: no key " + k) // a typo in this package, caught by its tests
}

// env is an environment variable, trimmed.
func env(name string) string { return strings.TrimSpace(os.Getenv(name)) }

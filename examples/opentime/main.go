// Command opentime measures how long a job takes to open its store under
// whatever launcher started it (ddrun, mpiexec, srun): every rank opens,
// adds one small variable (a collective over the store's connections) and
// closes; rank 0 prints one JSON line with the world size, the launcher,
// the slowest rank's Open, the slowest rank's Add and, when the launching
// script exported DDSTORE_LAUNCH_NS (date +%s%N just before the launcher),
// the time from the launch to the last rank's Open returning, the store's
// job id, and how the ranks found each other (bootstrap: pmi, pmi2, tcp).
//
//	DDSTORE_LAUNCH_NS=$(date +%s%N) ddrun -n 16 bin/opentime
package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/ddstore/ddstore/configs"
	"github.com/ddstore/ddstore/engine"
)

type result struct {
	World    int     `json:"world"`
	Launcher string  `json:"launcher"`
	Job      string  `json:"job"`              // the store's job id
	Boot     string  `json:"bootstrap"`        // how the ranks found each other: pmi, pmi2, tcp, dir
	Secret   string  `json:"secret"`           // where the job's secret came from (Store.Secret)
	OpenS    float64 `json:"open_s"`           // slowest rank's Open
	AddS     float64 `json:"add_s"`            // slowest rank's Add
	LaunchS  float64 `json:"launch_to_open_s"` // launch → last Open returned (0 without DDSTORE_LAUNCH_NS)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "opentime:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := engine.LoadConfig("")
	if err != nil {
		return err
	}
	o := cfg.StoreOptions()
	o.DisableTelemetry = true
	t0 := time.Now()
	st, err := engine.Open(o)
	if err != nil {
		return err
	}
	defer st.Close()
	opened := time.Now()
	openD := opened.Sub(t0)
	row := make([]byte, 64)
	for i := range row {
		row[i] = byte(st.Rank() + i)
	}
	t1 := time.Now()
	if err := st.Add("opentime", engine.Bytes, 64, row); err != nil {
		return err
	}
	addD := time.Since(t1)
	var mine [24]byte
	binary.LittleEndian.PutUint64(mine[0:], uint64(openD))
	binary.LittleEndian.PutUint64(mine[8:], uint64(addD))
	binary.LittleEndian.PutUint64(mine[16:], uint64(opened.UnixNano()))
	all, err := st.AllGather("opentime", mine[:])
	if err != nil {
		return err
	}
	if st.Rank() != 0 {
		return nil
	}
	var maxOpen, maxAdd time.Duration
	var lastOpen int64
	for _, b := range all {
		maxOpen = max(maxOpen, time.Duration(binary.LittleEndian.Uint64(b[0:])))
		maxAdd = max(maxAdd, time.Duration(binary.LittleEndian.Uint64(b[8:])))
		lastOpen = max(lastOpen, int64(binary.LittleEndian.Uint64(b[16:])))
	}
	r := result{World: st.World(), Job: st.Job(), Boot: st.Bootstrap(), Secret: st.Secret(), OpenS: maxOpen.Seconds(), AddS: maxAdd.Seconds(), Launcher: launcher()}
	if v := configs.LaunchNanos(); v > 0 {
		r.LaunchS = float64(lastOpen-v) / 1e9
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// ddrunToken: ddrun hands every rank a job token.
func ddrunToken() bool {
	l, err := configs.ReadLaunch()
	return err == nil && l.JobToken != ""
}

func launcher() string {
	switch {
	case os.Getenv("PMI_FD") != "" && os.Getenv("PMI_JOBID") == "":
		return "mpiexec"
	case os.Getenv("SLURM_STEP_ID") != "":
		return "srun"
	case ddrunToken():
		return "ddrun"
	}
	return "other"
}

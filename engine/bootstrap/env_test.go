package bootstrap

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/ddstore/ddstore/fault"
)

func TestDetectEnv(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want Env
		err  string // substring of the error; "" = success
	}{
		{name: "none", env: map[string]string{}, want: Env{Rank: 0, World: 1, LocalRank: 0, LocalWorld: 1, Launcher: "none"}},
		{name: "slurm", env: map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
			"SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_ID": "777", "SLURM_STEP_ID": "3"},
			want: Env{Rank: 5, World: 8, LocalRank: 1, LocalWorld: 4, Launcher: "slurm", Job: "slurm-777.3"}},
		{name: "slurm uneven", env: map[string]string{"SLURM_PROCID": "6", "SLURM_NTASKS": "7", "SLURM_LOCALID": "0",
			"SLURM_NODEID": "2", "SLURM_STEP_TASKS_PER_NODE": "3(x2),1", "SLURM_JOB_ID": "9"},
			want: Env{Rank: 6, World: 7, LocalRank: 0, LocalWorld: 1, Launcher: "slurm", Job: "slurm-9"}},
		{name: "slurm ntasks per node", env: map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0",
			"SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_ID": "1", "SLURM_STEP_ID": "0"},
			want: Env{Rank: 2, World: 4, LocalRank: 0, LocalWorld: 2, Launcher: "slurm", Job: "slurm-1.0"}},
		{name: "slurm no local size", env: map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "1"},
			want: Env{Rank: 2, World: 4, Launcher: "slurm", Job: "slurm-1"}},
		{name: "slurm garbage", env: map[string]string{"SLURM_PROCID": "two", "SLURM_NTASKS": "4"}, err: `SLURM_PROCID="two"`},
		{name: "slurm rank too big", env: map[string]string{"SLURM_PROCID": "4", "SLURM_NTASKS": "4"}, err: "SLURM_PROCID=4 is not below SLURM_NTASKS=4"},
		{name: "slurm missing ntasks", env: map[string]string{"SLURM_PROCID": "0"}, err: "SLURM_NTASKS is not set"},
		{name: "slurm bad tasks per node", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4",
			"SLURM_STEP_TASKS_PER_NODE": "2(x"}, err: "SLURM_STEP_TASKS_PER_NODE"},
		{name: "slurm localid vs node", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "3",
			"SLURM_NTASKS_PER_NODE": "2"}, err: "SLURM_LOCALID=3"},
		{name: "hydra", env: map[string]string{"PMI_RANK": "3", "PMI_SIZE": "4", "PMI_FD": "6",
			"MPI_LOCALRANKID": "3", "MPI_LOCALNRANKS": "4"},
			want: Env{Rank: 3, World: 4, LocalRank: 3, LocalWorld: 4, Launcher: "hydra"}},
		{name: "hydra bad fd", env: map[string]string{"PMI_RANK": "0", "PMI_SIZE": "4", "PMI_FD": "x"}, err: `PMI_FD="x"`},
		{name: "hydra size zero", env: map[string]string{"PMI_RANK": "0", "PMI_SIZE": "0"}, err: "PMI_SIZE=0"},
		{name: "openmpi", env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PMIX_NAMESPACE": "prterun-x-1@1"},
			want: Env{Rank: 1, World: 2, LocalRank: 1, LocalWorld: 2, Launcher: "openmpi", Job: "ompi-prterun-x-1@1"}},
		{name: "openmpi local inconsistent", env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, err: "OMPI_COMM_WORLD_LOCAL_RANK=2"},
		{name: "torchrun", env: map[string]string{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
			"MASTER_ADDR": "n1", "MASTER_PORT": "29500"},
			want: Env{Rank: 3, World: 8, LocalRank: 1, LocalWorld: 2, Launcher: "torchrun", Job: "torch-n1-29500"}},
		{name: "torchrun run id", env: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "abc"},
			want: Env{Rank: 0, World: 1, Launcher: "torchrun", Job: "torch-abc"}},
		{name: "torchrun with no shared id: unnamed, never the parent's pid", env: map[string]string{"RANK": "1", "WORLD_SIZE": "2"},
			want: Env{Rank: 1, World: 2, Launcher: "torchrun"}},
		{name: "torchrun missing world", env: map[string]string{"RANK": "0"}, err: "WORLD_SIZE is not set"},
		{name: "torchrun negative", env: map[string]string{"RANK": "-1", "WORLD_SIZE": "2"}, err: "RANK=-1"},
		{name: "torchrun local world too big", env: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "3"},
			err: "LOCAL_WORLD_SIZE=3"},
		{name: "torchrun inside slurm allocation wins", env: map[string]string{"RANK": "1", "WORLD_SIZE": "2",
			"SLURM_PROCID": "0", "SLURM_NTASKS": "64", "DDSTORE_JOB": "myjob"},
			want: Env{Rank: 1, World: 2, Launcher: "torchrun", Job: "myjob"}},
		{name: "hydra inside slurm wins", env: map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2",
			"SLURM_PROCID": "0", "SLURM_NTASKS": "64", "DDSTORE_JOB": "j2"},
			want: Env{Rank: 1, World: 2, Launcher: "hydra", Job: "j2"}},
		{name: "job override", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "5", "DDSTORE_JOB": "x-1"},
			want: Env{Rank: 0, World: 1, LocalWorld: 0, Launcher: "slurm", Job: "x-1"}},
		{name: "bad job override", env: map[string]string{"DDSTORE_JOB": "a/b"}, err: "DDSTORE_JOB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := detectEnv(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, fault.ErrEnv) {
					t.Fatalf("err = %v, want fault.ErrEnv containing %q (env %+v)", err, c.err, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Launcher == "none" { // one process: its own pid names the job
				if !strings.HasPrefix(got.Job, "local-") {
					t.Errorf("job %q", got.Job)
				}
				got.Job = ""
			}
			if got != c.want {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestParseTasksPerNode(t *testing.T) {
	got, err := parseTasksPerNode("2(x3),1,4(x1)")
	if err != nil || len(got) != 5 || got[0] != 2 || got[2] != 2 || got[3] != 1 || got[4] != 4 {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"", "x", "0", "2(x0)", "2(x3"} {
		if _, err := parseTasksPerNode(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{Method: "mpi"}, {Timeout: -1}, {Env: Env{Rank: 2, World: 2}}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

func TestPMIJobName(t *testing.T) {
	for kvs, want := range map[string]string{
		"kvs_26094_0_487958802_vm": "mpiexec-26094",
		"kvs_x_0_1_vm":             "pmi-kvs_x_0_1_vm",
		"kvs_0_0_1_vm":             "pmi-kvs_0_0_1_vm",
		"77.3":                     "pmi-77.3",
	} {
		if got := pmiJobName(kvs); got != want {
			t.Errorf("pmiJobName(%q) = %q, want %q", kvs, got, want)
		}
	}
}

// OpenMPIDir: the node's PMIx session directory for a one-node job, a
// clear error naming the variables for a job over several nodes.
func TestOpenMPIDir(t *testing.T) {
	one := Env{Rank: 1, World: 4, LocalRank: 1, LocalWorld: 4, Launcher: "openmpi"}
	cases := []struct {
		name string
		e    Env
		env  map[string]string
		want string // the directory, or a substring of the error
		err  bool
	}{
		{"session dir", one, map[string]string{"PMIX_SERVER_TMPDIR": "/tmp/ompi.n1.0/pid.7", "OMPI_MCA_orte_num_nodes": "1"},
			"/tmp/ompi.n1.0/pid.7", false},
		{"no session dir", one, map[string]string{}, os.TempDir(), false},
		{"ranks on other nodes", Env{Rank: 1, World: 4, LocalRank: 1, LocalWorld: 2, Launcher: "openmpi"},
			map[string]string{"PMIX_SERVER_TMPDIR": "/tmp/x"}, "OMPI_COMM_WORLD_LOCAL_SIZE=2 of OMPI_COMM_WORLD_SIZE=4", true},
		{"local size unknown", Env{Rank: 1, World: 4, LocalRank: 1, Launcher: "openmpi"},
			map[string]string{}, "OMPI_COMM_WORLD_LOCAL_SIZE=0 of OMPI_COMM_WORLD_SIZE=4", true},
		{"two nodes", one, map[string]string{"OMPI_MCA_orte_num_nodes": "2"}, "OMPI_MCA_orte_num_nodes=2", true},
		{"bad node count", one, map[string]string{"OMPI_MCA_orte_num_nodes": "many"}, `OMPI_MCA_orte_num_nodes="many"`, true},
		{"not open mpi", Env{Rank: 0, World: 2, LocalWorld: 2, Launcher: "hydra"}, map[string]string{}, `launcher "hydra"`, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			look := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
			dir, err := OpenMPIDir(look, c.e)
			switch {
			case c.err && err == nil:
				t.Fatalf("got %q, want an error with %q", dir, c.want)
			case c.err && (!errors.Is(err, fault.ErrEnv) || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want fault.ErrEnv with %q", err, c.want)
			case c.err && strings.Contains(c.want, " of ") && !strings.Contains(err.Error(), "mpi4py"):
				t.Fatalf("error %v does not say what to do instead", err)
			case !c.err && (err != nil || dir != c.want):
				t.Fatalf("got %q, %v; want %q", dir, err, c.want)
			}
		})
	}
}

package doctor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The written config trains 4 ranks of examples/train under ddrun, every
// remote row through the fabric (--node-mode fabric, so the written
// provider and interface carry the reads), with losses identical to the
// last digit to the embedded default config's.
func TestWrittenConfigTrains4Ranks(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	rep := report(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "machine.yaml")
	if err := rep.WriteConfig(cfg); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/ddrun", "./examples/train")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	args := strings.Fields("--json --no-progress --epochs 2 --rows-per-rank 96 --batch-size 16 --hidden 8 --lr 0.01 --seed 7 --node-mode fabric --check")
	run := func(config string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer, context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "ddrun"), append([]string{"-n", "4", "--timeout", "200s", "--",
			filepath.Join(dir, "train"), "--config", config}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		return cmd, &out, &errb, cancel
	}
	train := func(config string) map[int][]float64 {
		cmd, out, errb, cancel := run(config)
		defer cancel()
		if err := cmd.Run(); err != nil {
			t.Fatalf("config %s: %v\n%s", config, err, errb.String())
		}
		losses := map[int][]float64{}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e struct {
				Epoch, Rank, Rows int
				Loss              float64
			}
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("config %s: %q: %v", config, sc.Text(), err)
			}
			if e.Rows != 96 || e.Loss <= 0 {
				t.Fatalf("config %s: implausible epoch %+v", config, e)
			}
			losses[e.Epoch] = append(losses[e.Epoch], e.Loss)
		}
		if len(losses) != 2 || len(losses[0]) != 4 || len(losses[1]) != 4 {
			t.Fatalf("config %s: losses %v\n%s", config, losses, out.String())
		}
		return losses
	}
	mine := train(cfg)
	def := train("local")
	// The trainer does read the file: the same file with a provider that
	// is not offered fails the job, naming it.
	data, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, bytes.Replace(data, []byte(`provider: "`+Tune(rep).Provider+`"`), []byte(`provider: "nosuch"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, _, errb, cancel := run(bad)
	defer cancel()
	if err := cmd.Run(); err == nil || !strings.Contains(errb.String(), "nosuch") {
		t.Fatalf("a config with provider nosuch: %v\n%s", err, errb.String())
	}
	for ep := range 2 {
		for r := range 4 {
			if mine[ep][r] != def[0+ep][0] || def[ep][r] != def[ep][0] {
				t.Fatalf("epoch %d: losses with the written config %v, with the default %v", ep, mine[ep], def[ep])
			}
		}
	}
	if !(def[1][0] < def[0][0]) {
		t.Fatalf("loss does not decrease: %v", def)
	}
	t.Logf("losses %v (written config) = %v (default)", mine, def)
}

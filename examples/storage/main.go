// Command storage is a storage-only ddstore rank: it holds shards loaded
// from files, serves the trainers' reads through the fabric's progress
// thread (or through shared memory on the same node), and runs no
// training. It leaves when the trainers close the store.
//
// Launch it as a second step of the training job (a second `ddrun`, or
// `srun --overlap` on the training nodes for the colocate layout, or on
// nodes of its own for split-node), with the same job name, token and
// join address as the trainers:
//
//	DDSTORE_STORAGE_JOB=myrun DDSTORE_STORAGE_ADDR=node0:29600 \
//	DDSTORE_STORAGE_RANKS=4 DDSTORE_STORAGE_WIDTH=2 DDSTORE_STORAGE_TRAINERS=2 \
//	ddrun -n 4 storage --data /scratch/shards
//
// The file layout (DIR/<variable>/shard-<o>.npy, or .bin with meta.json)
// is documented in engine/storage.go; `train --write-shards DIR` writes the
// trainer example's data set in it.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/ddstore/ddstore/engine"
)

func main() {
	var config, data string
	cmd := &cobra.Command{
		Use:           "storage",
		Short:         "a storage-only ddstore rank: load shards from files and serve them until the job closes",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			cfg, err := engine.LoadConfig(config)
			if err != nil {
				return err
			}
			o := cfg.StoreOptions()
			o.Role = engine.RoleStorage
			if data != "" {
				o.Storage.Dir = data
			}
			st, err := engine.Open(o)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "storage rank %d of %d: serving\n", st.Rank(), st.World())
			return st.Serve()
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "config file or embedded name (local, frontier, perlmutter)")
	cmd.Flags().StringVar(&data, "data", "", "directory of shard files (default DDSTORE_STORAGE_DATA)")
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "storage:", err)
		os.Exit(1)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ddstore/ddstore/ui/serve"
)

// DefaultListen is where ddtop serve listens unless told otherwise: this
// machine only (telemetry names the job, its hosts and variables).
const DefaultListen = "127.0.0.1:9464"

// wideListen reports whether a bound address is reachable from other
// machines (anything but a loopback address).
func wideListen(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return !ok || !ta.IP.IsLoopback()
}

// serveCommand: ddtop serve [--listen 127.0.0.1:9464].
func serveCommand(out io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve [--listen 127.0.0.1:9464]",
		Short: "expose every segment at /metrics for Prometheus (read-only; segments are read only when scraped)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := jobSettings(cmd)
			if err != nil {
				return err
			}
			addr, _ := cmd.Flags().GetString("listen")
			c := serve.NewCollector(o.Dir, o.Job)
			c.Gzip, _ = cmd.Flags().GetBool("gzip")
			defer c.Close()
			h := serve.Handler(c)
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			fmt.Fprintf(out, "ddtop serve: %s at http://%s/metrics\n", o.Dir, ln.Addr())
			if wideListen(ln.Addr()) {
				fmt.Fprintf(out, "ddtop serve: WARNING: listening beyond this machine (%s): anyone who reaches this port "+
					"can read the job's telemetry (job, hosts, variables, rates); there is no authentication or TLS. "+
					"The default, %s, serves this machine only\n", ln.Addr(), DefaultListen)
			}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				srv.Shutdown(sctx)
			}()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().String("listen", DefaultListen, "address to serve /metrics on (default: this machine only; a wider one is warned about)")
	cmd.Flags().Bool("gzip", false, "gzip /metrics for scrapers that accept it (costs ddtop more CPU than the encoding itself)")
	return cmd
}

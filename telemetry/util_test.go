package telemetry

import (
	"fmt"
	"sync/atomic"
)

func fmtAny(v any) string { return fmt.Sprintf("%+v", v) }

func atomicAdd32(p *int32) int32 { return atomic.AddInt32(p, 1) - 1 }

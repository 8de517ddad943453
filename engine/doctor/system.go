package doctor

// Probes of the operating system: limits, /dev/shm, hugepages, CPU set
// and cgroup, interfaces, and the PCI tree's NUMA nodes. They read /proc
// and /sys only; what is missing is reported as unknown, never an error.

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Limits is what bounds memory and CPU for this process.
type Limits struct {
	MemlockSoft    int64  `json:"memlock_soft"` // bytes; -1 unlimited
	MemlockHard    int64  `json:"memlock_hard"`
	ShmDir         string `json:"shm_dir"`
	ShmSize        int64  `json:"shm_size"` // bytes; -1 unknown
	ShmFree        int64  `json:"shm_free"`
	HugePagesTotal int64  `json:"hugepages_total"`
	HugePagesFree  int64  `json:"hugepages_free"`
	HugePageBytes  int64  `json:"hugepage_bytes"`
	CPUs           string `json:"cpus"` // affinity list, "0-1"
	CPUCount       int    `json:"cpu_count"`
	CgroupCPUMax   string `json:"cgroup_cpu_max,omitempty"`    // cgroup v2 cpu.max ("max 100000") or v1 quota/period
	CgroupMemMax   string `json:"cgroup_memory_max,omitempty"` // cgroup v2 memory.max or v1 limit_in_bytes
}

// rlimitBytes maps RLIM_INFINITY to -1.
func rlimitBytes(v uint64) int64 {
	if v == unix.RLIM_INFINITY || v > 1<<62 {
		return -1
	}
	return int64(v)
}

func probeLimits(shmDir string) Limits {
	l := Limits{MemlockSoft: -1, MemlockHard: -1, ShmDir: shmDir, ShmSize: -1, ShmFree: -1}
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl) == nil {
		l.MemlockSoft, l.MemlockHard = rlimitBytes(rl.Cur), rlimitBytes(rl.Max)
	}
	var st unix.Statfs_t
	if unix.Statfs(shmDir, &st) == nil {
		l.ShmSize = int64(st.Blocks) * st.Bsize
		l.ShmFree = int64(st.Bavail) * st.Bsize
	}
	mi := readKV("/proc/meminfo")
	l.HugePagesTotal = atoi64(mi["HugePages_Total"])
	l.HugePagesFree = atoi64(mi["HugePages_Free"])
	l.HugePageBytes = atoi64(strings.TrimSuffix(mi["Hugepagesize"], " kB")) << 10
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		var cpus []int
		for i := 0; i < len(set)*64; i++ {
			if set.IsSet(i) {
				cpus = append(cpus, i)
			}
		}
		l.CPUs, l.CPUCount = cpuList(cpus), len(cpus)
	}
	l.CgroupCPUMax, l.CgroupMemMax = cgroupLimits()
	return l
}

// cpuList formats sorted CPU numbers as a kernel cpulist ("0-3,8").
func cpuList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, strconv.Itoa(cpus[i])+"-"+strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// cgroupLimits reads this process's cgroup CPU and memory limits (v2,
// else v1); "" where there is none to read.
func cgroupLimits() (cpu, mem string) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "": // v2
			dir := filepath.Join("/sys/fs/cgroup", f[2])
			cpu = firstLine(filepath.Join(dir, "cpu.max"))
			mem = firstLine(filepath.Join(dir, "memory.max"))
		case strings.Contains(f[1], "cpu,") || f[1] == "cpu" || strings.HasSuffix(f[1], ",cpu"):
			dir := filepath.Join("/sys/fs/cgroup/cpu,cpuacct", f[2])
			if q := firstLine(filepath.Join(dir, "cpu.cfs_quota_us")); q != "" {
				cpu = q + " " + firstLine(filepath.Join(dir, "cpu.cfs_period_us"))
			}
		case f[1] == "memory":
			mem = firstLine(filepath.Join("/sys/fs/cgroup/memory", f[2], "memory.limit_in_bytes"))
		}
	}
	return cpu, mem
}

// Iface is one network interface.
type Iface struct {
	Name     string   `json:"name"`
	Up       bool     `json:"up"`
	Loopback bool     `json:"loopback"`
	MTU      int      `json:"mtu"`
	Addrs    []string `json:"addrs,omitempty"`
	PCI      string   `json:"pci,omitempty"` // PCI address of the device; "" for virtual interfaces
	NUMA     int      `json:"numa"`          // NUMA node of the device; -1 unknown
	Route    bool     `json:"default_route"` // carries the default route: the path to other hosts
	Fabric   bool     `json:"fabric"`        // the engine's fabric domain on this node
}

func probeIfaces() []Iface {
	list, err := net.Interfaces()
	if err != nil {
		return nil
	}
	route := defaultRouteIface()
	var out []Iface
	for _, ni := range list {
		i := Iface{Name: ni.Name, Up: ni.Flags&net.FlagUp != 0, Loopback: ni.Flags&net.FlagLoopback != 0, MTU: ni.MTU,
			Route: ni.Name == route}
		if addrs, err := ni.Addrs(); err == nil {
			for _, a := range addrs {
				i.Addrs = append(i.Addrs, a.String())
			}
		}
		i.PCI, i.NUMA = pciOf(filepath.Join("/sys/class/net", ni.Name, "device"))
		out = append(out, i)
	}
	return out
}

// defaultRouteIface is the interface of the IPv4 default route ("" none).
func defaultRouteIface() string {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 2 && fs[1] == "00000000" && fs[0] != "Iface" {
			return fs[0]
		}
	}
	return ""
}

// pciOf resolves a sysfs device link to its PCI address and NUMA node
// ("", -1 when it is not a PCI device).
func pciOf(devLink string) (string, int) {
	real, err := filepath.EvalSymlinks(devLink)
	if err != nil {
		return "", -1
	}
	numa := -1
	if s := firstLine(filepath.Join(real, "numa_node")); s != "" {
		numa = int(atoi64(s))
	}
	base := filepath.Base(real)
	if strings.Count(base, ":") != 2 { // not a PCI address (virtio bus and the like)
		if p := filepath.Base(filepath.Dir(real)); strings.Count(p, ":") == 2 {
			base = p
		} else {
			base = ""
		}
	}
	return base, numa
}

// NUMANode is one NUMA node and its CPUs.
type NUMANode struct {
	Node int    `json:"node"`
	CPUs string `json:"cpus"`
}

func probeNUMA() []NUMANode {
	dirs, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	var out []NUMANode
	for _, d := range dirs {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			continue
		}
		out = append(out, NUMANode{Node: n, CPUs: firstLine(filepath.Join(d, "cpulist"))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// pciNUMA is the NUMA node of a PCI device by bus id ("00000000:3B:00.0"
// as CUDA gives it, or "0000:3b:00.0"); -1 unknown.
func pciNUMA(busID string) int {
	id := strings.ToLower(busID)
	if parts := strings.SplitN(id, ":", 2); len(parts) == 2 && len(parts[0]) > 4 {
		id = parts[0][len(parts[0])-4:] + ":" + parts[1]
	}
	s := firstLine(filepath.Join("/sys/bus/pci/devices", id, "numa_node"))
	if s == "" {
		return -1
	}
	return int(atoi64(s))
}

func readKV(path string) map[string]string {
	m := map[string]string{}
	data, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m
}

func firstLine(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s, _, _ := strings.Cut(string(data), "\n")
	return strings.TrimSpace(s)
}

func atoi64(s string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n
}

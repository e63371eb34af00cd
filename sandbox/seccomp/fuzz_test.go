package seccomp

import (
	"testing"
)

// FuzzProgram runs each architecture's program on arbitrary seccomp_data:
// the interpreter never fails (no load outside the data, no running off the
// end), the verdict is the one Rules define (reference), a call refused
// whatever its arguments is never allowed, a foreign arch or an x32 number is
// always killed, and nothing but ALLOW, KILL_PROCESS or a rule's errno comes
// out.
func FuzzProgram(f *testing.F) {
	for _, r := range Rules() {
		for _, goarch := range goarches {
			if nr, ok := arches[goarch].nr[r.Syscall]; ok {
				f.Add(uint8(0), nr, uint64(0), uint64(0), uint64(0), uint64(0o4755), uint64(0), uint64(0))
				f.Add(uint8(1), nr, ^uint64(0), uint64(0x5412), uint64(0x40), uint64(0o2000), uint64(1<<32), uint64(0))
			}
		}
	}
	f.Add(uint8(2), uint32(x32Bit|257), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint8(4), uint32(0xffffffff), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))

	progs := map[string][]instruction{}
	for _, goarch := range goarches {
		progs[goarch] = program(f, goarch)
	}
	errnos := map[uint32]bool{}
	for _, r := range Rules() {
		errnos[retErrno|uint32(r.Errno)] = true
	}

	f.Fuzz(func(t *testing.T, sel uint8, nr uint32, a0, a1, a2, a3, a4, a5 uint64) {
		goarch := goarches[sel&1]
		a := arches[goarch]
		d := seccompData{nr: nr, arch: a.audit, ip: uint64(nr) * 4096, args: [6]uint64{a0, a1, a2, a3, a4, a5}}
		switch sel >> 1 & 3 {
		case 1: // a foreign architecture
			d.arch = uint32(a0)
		case 2: // a small number, to hit the rules
			d.nr %= 512
		}
		got, err := run(progs[goarch], d.bytes())
		if err != nil {
			t.Fatalf("%s %+v: %v", goarch, d, err)
		}
		if want := reference(a, d); got != want {
			t.Fatalf("%s %+v: %s, the rules say %s", goarch, d, verdict(got), verdict(want))
		}
		if got != retAllow && got != retKillProcess && !errnos[got] {
			t.Fatalf("%s %+v: unexpected verdict %#x", goarch, d, got)
		}
		if d.arch != a.audit && got != retKillProcess {
			t.Fatalf("%s: arch %#x not killed: %s", goarch, d.arch, verdict(got))
		}
		if a.x32 && d.arch == a.audit && d.nr >= x32Bit && d.nr != 0xffffffff && got != retKillProcess {
			t.Fatalf("%s: x32 number %#x not killed: %s", goarch, d.nr, verdict(got))
		}
		if d.arch == a.audit && got == retAllow {
			for name := range refusedAlways {
				if n, ok := a.nr[name]; ok && n == d.nr {
					t.Fatalf("%s: %s allowed with args %#x", goarch, name, d.args)
				}
			}
		}
	})
}

package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// ErrUnsupportedArch is returned by Program for a GOARCH it has no syscall
// table for.
var ErrUnsupportedArch = errors.New("no seccomp syscall table for this architecture")

// Classic BPF opcodes (linux/bpf_common.h) and seccomp return values
// (linux/seccomp.h) the generator emits.
const (
	opLdAbsW = 0x20 // BPF_LD | BPF_W | BPF_ABS: A = *(u32 *)(data + k)
	opAndK   = 0x54 // BPF_ALU | BPF_AND | BPF_K: A &= k
	opJeqK   = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	opJgeK   = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	opJsetK  = 0x45 // BPF_JMP | BPF_JSET | BPF_K
	opRetK   = 0x06 // BPF_RET | BPF_K

	retKillProcess = 0x80000000
	retErrno       = 0x00050000
	retAllow       = 0x7fff0000

	// Offsets in struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}.
	// Both supported architectures are little-endian: the low word of
	// args[i] comes first.
	offNr   = 0
	offArch = 4
	offArgs = 16

	x32Bit = 0x40000000 // __X32_SYSCALL_BIT

	maxInstructions = 4096 // BPF_MAXINSNS
)

// instruction is struct sock_filter.
type instruction struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

// Program returns the filter for goarch ("amd64" or "arm64") as bwrap's
// --seccomp and --add-seccomp-fd read it from a descriptor: an array of
// struct sock_filter (8 bytes each) in the architecture's byte order, the
// format of libseccomp's seccomp_export_bpf. Hand it to bwrap on an inherited
// descriptor (a pipe or a memfd), e.g. `--seccomp 3` with the bytes on fd 3;
// bwrap sets no_new_privs and loads it just before it executes the command.
//
// The program first checks seccomp_data.arch: a call made through another ABI
// (i386's int 0x80 on x86_64, AArch32 on arm64) kills the process, and so does
// an x32 call (bit 30 set in the number on x86_64); their numbers do not match
// the table the rules were resolved with. Then it applies Rules and allows
// everything else.
func Program(goarch string) ([]byte, error) {
	prog, err := assemble(goarch)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		b = binary.LittleEndian.AppendUint16(b, in.code)
		b = append(b, in.jt, in.jf)
		b = binary.LittleEndian.AppendUint32(b, in.k)
	}
	return b, nil
}

// assemble generates the program for goarch. Its layout:
//
//	    ld arch;  jeq AUDIT_ARCH ? next : kill
//	    ld nr
//	    (x86_64) jge x32Bit ? (jeq 0xffffffff ? rules : kill) : rules
//	rules, each: jeq NR ? next : skip
//	    [conditional: ld arg; test ... ; on a miss jump to reload]
//	    ret ERRNO|errno
//	    [conditional: reload: ld nr]
//	skip:
//	    ret ALLOW
//
// Every jump is forward and short (within one rule), so the program never
// needs long jumps however many rules there are, and a call no rule names
// never reads an argument, which is what lets the kernel cache its verdict.
func assemble(goarch string) ([]instruction, error) {
	a, ok := arches[goarch]
	if !ok {
		known := make([]string, 0, len(arches))
		for k := range arches {
			known = append(known, k)
		}
		sort.Strings(known)
		return nil, fmt.Errorf("seccomp filter for GOARCH %q: %w (supported: %s)",
			goarch, ErrUnsupportedArch, strings.Join(known, ", "))
	}
	var as assembler
	as.load(offArch)
	sameArch, kill := as.label(), as.label()
	as.jump(opJeqK, a.audit, sameArch, kill)
	as.bind(kill)
	as.ret(retKillProcess)
	as.bind(sameArch)
	as.load(offNr)
	if a.x32 {
		high, rules, killX32 := as.label(), as.label(), as.label()
		as.jump(opJgeK, x32Bit, high, rules)
		as.bind(high)
		// nr -1 is what a tracer sets to skip a call; the kernel then
		// returns ENOSYS itself (libseccomp lets it through too).
		as.jump(opJeqK, 0xffffffff, rules, killX32)
		as.bind(killX32)
		as.ret(retKillProcess)
		as.bind(rules)
	}
	for _, r := range Rules() {
		nr, ok := a.nr[r.Syscall]
		if !ok {
			if a.absent[r.Syscall] {
				continue
			}
			return nil, fmt.Errorf("seccomp rule for %q: no such system call in the %s table", r.Syscall, goarch)
		}
		if err := as.rule(nr, r); err != nil {
			return nil, fmt.Errorf("seccomp rule %s: %w", r, err)
		}
	}
	as.ret(retAllow)
	return as.finish()
}

// assembler collects instructions whose jump targets are labels, resolved
// by finish.
type assembler struct {
	prog   []instruction
	labels []int // label -> instruction index, -1 until bound
	fixups []fixup
}

type fixup struct {
	at     int // instruction index
	jt, jf int // labels
}

func (as *assembler) label() int {
	as.labels = append(as.labels, -1)
	return len(as.labels) - 1
}

func (as *assembler) bind(l int) { as.labels[l] = len(as.prog) }

func (as *assembler) emit(code uint16, k uint32) {
	as.prog = append(as.prog, instruction{code: code, k: k})
}

func (as *assembler) load(off uint32) { as.emit(opLdAbsW, off) }
func (as *assembler) ret(v uint32)    { as.emit(opRetK, v) }

func (as *assembler) jump(code uint16, k uint32, jt, jf int) {
	as.fixups = append(as.fixups, fixup{at: len(as.prog), jt: jt, jf: jf})
	as.emit(code, k)
}

// rule emits one rule; A holds nr before and after.
func (as *assembler) rule(nr uint32, r Rule) error {
	if r.Errno == 0 {
		return errors.New("errno 0 would make the refused call look successful")
	}
	match, skip := as.label(), as.label()
	as.jump(opJeqK, nr, match, skip)
	as.bind(match)
	if len(r.Conds) == 0 {
		as.ret(retErrno | uint32(r.Errno))
		as.bind(skip)
		return nil
	}
	miss := as.label()
	for _, c := range r.Conds {
		if c.Arg < 0 || c.Arg > 5 {
			return fmt.Errorf("argument %d: a system call has arguments 0 to 5", c.Arg)
		}
		as.load(offArgs + 8*uint32(c.Arg))
		hit := as.label()
		switch c.Op {
		case HasAny:
			as.jump(opJsetK, c.Mask, hit, miss)
		case In, NotIn:
			if len(c.Values) == 0 {
				return errors.New("In and NotIn need values")
			}
			if c.Mask != 0xffffffff {
				as.emit(opAndK, c.Mask)
			}
			for i, v := range c.Values {
				last := i == len(c.Values)-1
				next := as.label()
				switch {
				case c.Op == In && last:
					as.jump(opJeqK, v, hit, miss)
				case c.Op == In:
					as.jump(opJeqK, v, hit, next)
				case last: // NotIn
					as.jump(opJeqK, v, miss, hit)
				default:
					as.jump(opJeqK, v, miss, next)
				}
				as.bind(next)
			}
		default:
			return fmt.Errorf("unknown op %d", c.Op)
		}
		as.bind(hit)
	}
	as.ret(retErrno | uint32(r.Errno))
	as.bind(miss)
	as.load(offNr)
	as.bind(skip)
	return nil
}

// finish resolves the jumps. Classic BPF jumps forward only, by at most 255
// instructions for a conditional jump.
func (as *assembler) finish() ([]instruction, error) {
	prog := slices.Clone(as.prog)
	for _, f := range as.fixups {
		for i, l := range []int{f.jt, f.jf} {
			to := as.labels[l]
			d := to - f.at - 1
			if to < 0 || d < 0 || d > 255 {
				return nil, fmt.Errorf("seccomp program: jump from %d to %d out of range", f.at, to)
			}
			if i == 0 {
				prog[f.at].jt = uint8(d)
			} else {
				prog[f.at].jf = uint8(d)
			}
		}
	}
	if len(prog) > maxInstructions {
		return nil, fmt.Errorf("seccomp program: %d instructions, the kernel takes at most %d", len(prog), maxInstructions)
	}
	return prog, nil
}

// Number returns the number of system call name on goarch, and false when the
// call does not exist there or the architecture is not supported.
func Number(goarch, name string) (uint32, bool) {
	a, ok := arches[goarch]
	if !ok {
		return 0, false
	}
	nr, ok := a.nr[name]
	return nr, ok
}

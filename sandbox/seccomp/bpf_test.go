package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A small interpreter for the classic BPF that seccomp runs: the opcodes the
// kernel's seccomp_check_filter accepts that the generator may plausibly
// emit. Anything else is an error, so a generator change that used a new
// opcode fails here until the interpreter (and the kernel test) cover it.

// seccompData is struct seccomp_data.
type seccompData struct {
	nr   uint32
	arch uint32
	ip   uint64
	args [6]uint64
}

func (d seccompData) bytes() []byte {
	b := make([]byte, 0, 64)
	b = binary.LittleEndian.AppendUint32(b, d.nr)
	b = binary.LittleEndian.AppendUint32(b, d.arch)
	b = binary.LittleEndian.AppendUint64(b, d.ip)
	for _, a := range d.args {
		b = binary.LittleEndian.AppendUint64(b, a)
	}
	return b
}

// decode reads Program's bytes back into instructions.
func decode(b []byte) ([]instruction, error) {
	if len(b)%8 != 0 || len(b) == 0 {
		return nil, fmt.Errorf("program of %d bytes is not a non-empty array of 8-byte sock_filter", len(b))
	}
	prog := make([]instruction, len(b)/8)
	for i := range prog {
		p := b[8*i:]
		prog[i] = instruction{code: binary.LittleEndian.Uint16(p), jt: p[2], jf: p[3], k: binary.LittleEndian.Uint32(p[4:])}
	}
	return prog, nil
}

// validate checks what the kernel's bpf_check_classic and
// seccomp_check_filter check before they accept a program.
func validate(prog []instruction) error {
	if len(prog) == 0 || len(prog) > maxInstructions {
		return fmt.Errorf("%d instructions", len(prog))
	}
	for pc, in := range prog {
		switch in.code {
		case opLdAbsW:
			if in.k >= 64 || in.k%4 != 0 {
				return fmt.Errorf("%d: load from offset %d outside seccomp_data", pc, in.k)
			}
		case opAndK, opRetK:
		case opJeqK, opJgeK, opJsetK, 0x25 /* jgt */ :
			if pc+1+int(in.jt) >= len(prog) || pc+1+int(in.jf) >= len(prog) {
				return fmt.Errorf("%d: jump out of the program", pc)
			}
		case 0x05: // ja
			if uint64(pc)+1+uint64(in.k) >= uint64(len(prog)) {
				return fmt.Errorf("%d: jump out of the program", pc)
			}
		default:
			return fmt.Errorf("%d: opcode %#x", pc, in.code)
		}
	}
	if prog[len(prog)-1].code != opRetK {
		return errors.New("last instruction is not a return")
	}
	return nil
}

// run executes a validated program on data and returns its verdict.
func run(prog []instruction, data []byte) (uint32, error) {
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.code {
		case opLdAbsW:
			if in.k+4 > uint32(len(data)) {
				return 0, fmt.Errorf("%d: load beyond the data", pc)
			}
			acc = binary.LittleEndian.Uint32(data[in.k:])
		case opAndK:
			acc &= in.k
		case opRetK:
			return in.k, nil
		case 0x05:
			pc += int(in.k)
		case opJeqK, opJgeK, opJsetK, 0x25:
			var cond bool
			switch in.code {
			case opJeqK:
				cond = acc == in.k
			case opJgeK:
				cond = acc >= in.k
			case opJsetK:
				cond = acc&in.k != 0
			default:
				cond = acc > in.k
			}
			if cond {
				pc += int(in.jt)
			} else {
				pc += int(in.jf)
			}
		default:
			return 0, fmt.Errorf("%d: opcode %#x", pc, in.code)
		}
	}
	return 0, errors.New("ran off the end of the program")
}

// verdict names a seccomp return value for test messages.
func verdict(v uint32) string {
	switch {
	case v == retAllow:
		return "ALLOW"
	case v == retKillProcess:
		return "KILL_PROCESS"
	case v&0xffff0000 == retErrno:
		return Errno(v & 0xffff).String()
	}
	return fmt.Sprintf("%#x", v)
}

// reference evaluates Rules directly, the way the kernel and the doc comments
// describe them, without BPF: what the program must compute.
func reference(a *arch, d seccompData) uint32 {
	if d.arch != a.audit {
		return retKillProcess
	}
	if a.x32 && d.nr >= x32Bit && d.nr != 0xffffffff {
		return retKillProcess
	}
	for _, r := range Rules() {
		nr, ok := a.nr[r.Syscall]
		if !ok || nr != d.nr {
			continue
		}
		all := true
		for _, c := range r.Conds {
			v := uint32(d.args[c.Arg]) & c.Mask
			var hold bool
			switch c.Op {
			case HasAny:
				hold = v != 0
			case In, NotIn:
				found := false
				for _, x := range c.Values {
					found = found || v == x
				}
				hold = found == (c.Op == In)
			}
			all = all && hold
		}
		if all {
			return retErrno | uint32(r.Errno)
		}
	}
	return retAllow
}

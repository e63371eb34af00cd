# Probe script run by pylayer's target.Probe with "python -I -S -c".
# It only reports facts; all tag logic lives in Go. Keep it compatible with
# Python 3.6+ and import nothing outside the standard library. Facts mirror
# what pip 23's vendored packaging 21.3 reads in tags.py, _manylinux.py and
# _musllinux.py, so that Go can compute exactly what sys_tags() would.
import json
import os
import platform
import struct
import subprocess
import sys
import sysconfig
from importlib.machinery import EXTENSION_SUFFIXES


def glibc():
    # _manylinux._glibc_version_string: confstr first, then ctypes.
    try:
        s = os.confstr("CS_GNU_LIBC_VERSION")
        assert s is not None
        _, v = s.split()
        if v:
            return v
    except (AssertionError, AttributeError, OSError, ValueError):
        pass
    try:
        import ctypes
        ns = ctypes.CDLL(None)
        f = ns.gnu_get_libc_version
    except (ImportError, OSError, AttributeError):
        return None
    f.restype = ctypes.c_char_p
    v = f()
    if not isinstance(v, str):
        v = v.decode("ascii")
    return v


def elf_header(path):
    # _manylinux._ELFFileHeader, reduced to the fields _have_compatible_abi uses.
    try:
        with open(path, "rb") as f:
            def unpack(fmt):
                return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]
            if unpack(">I") != 0x7F454C46:
                return None
            cls, data = unpack("B"), unpack("B")
            if cls not in (1, 2) or data not in (1, 2):
                return None
            f.read(10)  # version, osabi, abiversion, 7 bytes pad
            h = "<H" if data == 1 else ">H"
            i = "<I" if data == 1 else ">I"
            p = i if cls == 1 else ("<Q" if data == 1 else ">Q")
            unpack(h)
            machine = unpack(h)
            unpack(i)
            unpack(p)
            unpack(p)
            unpack(p)
            flags = unpack(i)
            return {"class": cls, "data": data, "machine": machine, "flags": flags}
    except (OSError, TypeError, struct.error):
        return None


def musl_loader(path):
    # _musllinux._parse_ld_musl_from_elf
    def rd(f, fmt):
        return struct.unpack(fmt, f.read(struct.calcsize(fmt)))
    try:
        with open(path, "rb") as f:
            ident = rd(f, "16B")
            if ident[:4] != tuple(b"\x7fELF"):
                return None
            f.seek(struct.calcsize("HHI"), 1)
            fmts = {1: ("IIIIHHH", "IIIIIIII", (0, 1, 4)), 2: ("QQQIHHH", "IIQQQQQQ", (0, 2, 5))}
            if ident[4] not in fmts:
                return None
            e_fmt, p_fmt, p_idx = fmts[ident[4]]
            _, e_phoff, _, _, _, e_phentsize, e_phnum = rd(f, e_fmt)
            for n in range(e_phnum + 1):
                f.seek(e_phoff + e_phentsize * n)
                ph = rd(f, p_fmt)
                if ph[p_idx[0]] != 3:
                    continue
                f.seek(ph[p_idx[1]])
                interp = os.fsdecode(f.read(ph[p_idx[2]])).strip("\0")
                return interp if "musl" in interp else None
    except (OSError, struct.error):
        return None
    return None


def has_manylinux_module():
    try:
        import _manylinux  # noqa: F401
    except ImportError:
        return False
    return True


def markers():
    # packaging.markers.default_environment
    iv = sys.implementation.version
    ver = "{0.major}.{0.minor}.{0.micro}".format(iv)
    if iv.releaselevel != "final":
        ver += iv.releaselevel[0] + str(iv.serial)
    return {
        "implementation_name": sys.implementation.name,
        "implementation_version": ver,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }


def main():
    exe = sys.executable
    facts = {
        "version": list(sys.version_info[:2]),
        "implementation": sys.implementation.name,
        "py_debug": sysconfig.get_config_var("Py_DEBUG"),
        "gil_disabled": sysconfig.get_config_var("Py_GIL_DISABLED"),
        "has_refcount": hasattr(sys, "gettotalrefcount"),
        "has_d_pyd": "_d.pyd" in EXTENSION_SUFFIXES,
        "soabi": sysconfig.get_config_var("SOABI"),
        "abiflags": getattr(sys, "abiflags", ""),
        "is_32bit": sys.maxsize <= 2 ** 32,
        "sysconfig_platform": sysconfig.get_platform(),
        "glibc": glibc(),
        "elf": elf_header(exe),
        "musl_loader_output": None,
        "manylinux_module": has_manylinux_module(),
        "markers": markers(),
    }
    ld = musl_loader(exe)
    if ld:
        proc = subprocess.run([ld], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=10)
        facts["musl_loader_output"] = proc.stderr
    sys.stdout.write(json.dumps(facts, sort_keys=True))


main()

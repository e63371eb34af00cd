package wheel

import (
	"bytes"

	"github.com/pylayer/pylayer/test/fixture"
)

// goodWheels are generated wheels covering the install layout; every one is installed by
// pip and by Install in the oracle test.
func goodWheels() []fixture.Wheel {
	blob := bytes.Repeat([]byte{0x7f, 'E', 'L', 'F', 0, 1, 2, 0xff}, 512)
	return []fixture.Wheel{
		{Name: "minimal", Version: "1.0"},
		{
			Name: "nested", Version: "2.3.post1", RequiresDist: []string{"minimal>=1"},
			Files: []fixture.File{
				{Path: "nested/__init__.py", Data: []byte("from .a.b import c\n")},
				{Path: "nested/a/__init__.py", Data: []byte("")},
				{Path: "nested/a/b/__init__.py", Data: []byte("")},
				{Path: "nested/a/b/c.py", Data: []byte("def c():\n    return {'x', 'y', 'z'}\n")},
				{Path: "nested/data/config.json", Data: []byte(`{"k": [1, 2]}` + "\n")},
				{Path: "nested/tool.sh", Data: []byte("#!/bin/sh\necho hi\n"), Mode: 0o755},
				{Path: "nested/empty.txt", Data: nil},
				{Path: "top_level_module.py", Data: []byte("X = 1\n")},
			},
		},
		{
			Name: "unicode-names", Version: "0.1",
			Files: []fixture.File{
				{Path: "unicode_names/__init__.py", Data: []byte("# é\n")},
				{Path: "unicode_names/données.txt", Data: []byte("é\n")},
				{Path: "unicode_names/日本語.py", Data: []byte("名前 = 1\n")},
				{Path: "unicode_names/with space.txt", Data: []byte("s\n")},
				{Path: "unicode_names/a,b.txt", Data: []byte("comma\n")},
				{Path: `unicode_names/q"uote.txt`, Data: []byte("quote\n")},
			},
		},
		{
			Name: "platwheel", Version: "1.0", Tag: "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64",
			Files: []fixture.File{
				{Path: "platwheel/__init__.py", Data: []byte("from ._ext import *\n")},
				{Path: "platwheel/_ext.cpython-311-x86_64-linux-gnu.so", Data: blob, Mode: 0o755},
				{Path: "platwheel.libs/libfoo-1234abcd.so.1", Data: blob, Mode: 0o755},
				{Path: "platwheel-1.0.data/platlib/platwheel_extra.py", Data: []byte("E = 1\n")},
			},
		},
		{
			Name: "my.Data_pkg", Version: "3.0rc1",
			Files: []fixture.File{
				{Path: "my_data_pkg/__init__.py", Data: []byte("")},
				{Path: "my_Data_pkg-3.0rc1.data/scripts/tool", Data: []byte("#!python\nprint('tool')\n")},
				{Path: "my_Data_pkg-3.0rc1.data/scripts/toolw", Data: []byte("#!pythonw -u\r\nprint('w')\n"), Mode: 0o755},
				{Path: "my_Data_pkg-3.0rc1.data/scripts/shell", Data: []byte("#!/bin/sh\necho sh\n"), Mode: 0o755},
				{Path: "my_Data_pkg-3.0rc1.data/scripts/nonl", Data: []byte("#!python")},
				{Path: "my_Data_pkg-3.0rc1.data/scripts/binary", Data: blob, Mode: 0o755},
				{Path: "my_Data_pkg-3.0rc1.data/headers/my_data.h", Data: []byte("int x;\n")},
				{Path: "my_Data_pkg-3.0rc1.data/headers/sub/inner.h", Data: []byte("int y;\n")},
				{Path: "my_Data_pkg-3.0rc1.data/data/share/my-data/readme.txt", Data: []byte("data\n")},
				{Path: "my_Data_pkg-3.0rc1.data/purelib/my_data_extra/__init__.py", Data: []byte("P = 1\n")},
			},
		},
		{
			Name: "entry", Version: "1.0",
			Files: []fixture.File{
				{Path: "entry/__init__.py", Data: []byte("def main():\n    return 0\n")},
				{Path: "entry/cli.py", Data: []byte("class app:\n    @staticmethod\n    def run():\n        return 0\n")},
				// setuptools wrappers for entry points: pip does not install them.
				{Path: "entry-1.0.data/scripts/entry-cli", Data: []byte("#!python\nold wrapper\n")},
				{Path: "entry-1.0.data/scripts/entry-cli-script.py", Data: []byte("old wrapper\n")},
				{Path: "entry-1.0.data/scripts/entry-gui.exe", Data: []byte("MZ")},
				{Path: "entry-1.0.data/scripts/kept", Data: []byte("#!python\nkept\n")},
			},
			EntryPoints: "# comment\n[console_scripts]\nentry-cli = entry.cli:app.run\n" +
				"entry_plain=entry:main\n  spaced  =  entry:main  [extra1, extra2]  \nentry.dotted+x = entry.cli:app\n" +
				"[gui_scripts]\nentry-gui = entry:main\n\n[other.group]\nanything = goes:here\n",
		},
		{
			// pip rewrites the versioned pip and easy_install scripts for the running Python.
			Name: "toolbox", Version: "1.0",
			EntryPoints: "[console_scripts]\npip = toolbox:main\npip3 = toolbox:main\npip3.8 = toolbox:main\n" +
				"easy_install = toolbox:ei\neasy_install-3.8 = toolbox:ei\nother = toolbox:main\n",
		},
		{
			Name: "py2files", Version: "1.0",
			Files: []fixture.File{
				{Path: "py2files/__init__.py", Data: []byte("OK = True\n")},
				{Path: "py2files/tests/py2only.py", Data: []byte("print 'hello'\n")},
				{Path: "py2files/sets.py", Data: []byte("def f(x):\n    return x in {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'}\n")},
			},
		},
	}
}

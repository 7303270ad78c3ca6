#!/usr/bin/env python3
"""unit:floors-planted: check_floors.py fails, naming it, on a violation of each kind planted in
a copy of the tree, and passes on the tree itself.

Copies docs/design.md and the source folders (src, io, mpi, cuda: their sources and the
CMakeLists.txt the checker reads) into a temporary folder, checks that the copy passes, then
plants each violation in turn (a new file, or a line added to a CMakeLists.txt), runs the
checker on the copy with this interpreter, expects exit status 1 and a line naming the
planted file and what it did, and takes the plant out again.
Usage: test_planted.py [REPO_ROOT]
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, 'check_floors.py')

# (what, {path: text to write, or to append when the path exists}, words the failure names)
PLANTS = [
    ('a quoted upward include',
     {'src/core/planted.cpp': '#include "src/train/trainer.hpp"\nnamespace squall {}\n'},
     ['src/core/planted.cpp:1', '"src/train/trainer.hpp"', 'above floor 0']),
    ('an unrooted upward include',
     {'src/nn/planted.cpp': '#include "../config/config.hpp"\nnamespace squall::nn {}\n'},
     ['src/nn/planted.cpp:1', '"../config/config.hpp"', 'src/config/', 'above floor 1']),
    ('an unrooted include of its own folder',
     {'src/nn/planted.cpp': '#include "tensor.hpp"\nnamespace squall::nn {}\n'},
     ['src/nn/planted.cpp:1', '"tensor.hpp"', 'write it from the repository root, "src/nn/tensor.hpp"']),
    ('an include of a folder on a lower floor that its row does not list',
     {'io/pictures/planted.cpp': '#include "mpi/comm.hpp"\nnamespace squall::pictures {}\n'},
     ['io/pictures/planted.cpp:1', '"mpi/comm.hpp"', 'not listed in its row']),
    ('a guarded third-party include not allowed',
     {'src/optim/planted.cpp': '#include <hdf5.h>\nnamespace squall::optim {}\n'},
     ['src/optim/planted.cpp:1', '<hdf5.h> (HDF5)', 'src/optim/ may not']),
    ('a guarded third-party include written with quotes',
     {'src/data/planted.cpp': '#include "mpi.h"\nnamespace squall::data {}\n'},
     ['src/data/planted.cpp:1', '"mpi.h" (MPI)', 'src/data/ may not']),
    ('a third party allowed in one file of the folder, included in another',
     {'mpi/planted.cpp': '#include <nccl.h>\nnamespace squall::mpi {}\n'},
     ['mpi/planted.cpp:1', '<nccl.h> (NCCL)', 'only nccl.cpp']),
    ('a third party brought by a header of a folder the row allows',
     {'src/eval/planted.cpp': '#include "io/formats/h5_util.hpp"\nnamespace squall::eval {}\n'},
     ['src/eval/planted.cpp:1', 'brings <hdf5.h> (HDF5', 'src/eval/ may not']),
    ('a wrong namespace',
     {'src/optim/planted.cpp': '#include <vector>\nnamespace squall::nn {\nint planted() { return 1; }\n}\n'},
     ['src/optim/planted.cpp:3', 'declares code in squall::nn', 'squall::optim']),
    ('code outside every namespace',
     {'src/data/planted.hpp': '#pragma once\nint planted();\n'},
     ['src/data/planted.hpp:2', 'the global namespace', 'squall::data']),
    ('an anonymous namespace at file scope',
     {'io/input/planted.cpp': 'namespace {\nint planted = 1;\n}\nnamespace squall::input {}\n'},
     ['io/input/planted.cpp:2', 'the global namespace', 'squall::input']),
    ('a namespace the row allows in another file only',
     {'src/cpu/planted.cpp': 'namespace squall::nn {\nint planted() { return 1; }\n}\n'},
     ['src/cpu/planted.cpp:2', 'declares code in squall::nn', 'squall::cpu']),
    ('a wrong namespace after literals and comments that hold braces and namespaces',
     {'src/nn/planted.cpp': 'namespace squall::nn {\n'
                            'const char* a = R"x(namespace squall::nn { } } {)x";\n'
                            "const char b = '}'; const char* c = \"}\\\"}\"; // }\n"
                            '/* } namespace squall::nn { */ const long d = 1\'000\'000;\n'
                            '#define PLANTED }\n'
                            '}  // namespace squall::nn\n'
                            'namespace squall::data {\nint planted() { return 1; }\n}\n'},
     ['src/nn/planted.cpp:8', 'declares code in squall::data', 'squall::nn']),
    ('a link to a higher-floor library',
     {'src/nn/CMakeLists.txt': 'target_link_libraries(squall_nn PRIVATE squall_train)\n'},
     ['src/nn/CMakeLists.txt', 'squall_nn links squall_train', 'above floor 1']),
    ('a link to a lower-floor library its row does not list',
     {'io/pictures/CMakeLists.txt': 'target_link_libraries(squall_pictures PRIVATE squall_mpi)\n'},
     ['io/pictures/CMakeLists.txt', 'squall_pictures links squall_mpi', 'not listed in its row']),
    ('a link to a third party not allowed',
     {'src/optim/CMakeLists.txt': 'target_link_libraries(squall_optim PRIVATE hdf5::hdf5)\n'},
     ['src/optim/CMakeLists.txt', 'squall_optim links hdf5::hdf5 (HDF5)', 'src/optim/ may not']),
    ('a link to a third party written as a variable',
     {'src/data/CMakeLists.txt': 'target_link_libraries(squall_data PRIVATE ${UDUNITS2_LIBRARY})\n'},
     ['src/data/CMakeLists.txt', '(UDUNITS-2)', 'src/data/ may not']),
    ('a folder without a row',
     {'src/planted/planted.cpp': 'namespace squall::planted {}\n'},
     ['src/planted/: holds sources but has no floor']),
]


def run_checker(root):
    r = subprocess.run([sys.executable, CHECKER, root], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def copy_tree(repo, into):
    os.makedirs(os.path.join(into, 'docs'))
    shutil.copy(os.path.join(repo, 'docs', 'design.md'), os.path.join(into, 'docs', 'design.md'))
    wanted = ('.cpp', '.hpp', '.cu', '.cuh', '.h', '.in', 'CMakeLists.txt')
    for top in ('src', 'io', 'mpi', 'cuda'):
        shutil.copytree(os.path.join(repo, top), os.path.join(into, top),
                        ignore=lambda d, names: [n for n in names if not os.path.isdir(os.path.join(d, n))
                                                 and not n.endswith(wanted)])


def plant(root, files):
    """Writes the plant; returns how to take it out again."""
    undo = []
    for rel, text in files.items():
        path = os.path.join(root, rel)
        if os.path.exists(path):
            before = open(path, encoding='utf-8').read()
            open(path, 'a', encoding='utf-8').write(text)
            undo.append(lambda path=path, before=before: open(path, 'w', encoding='utf-8').write(before))
        else:
            made = os.path.dirname(path)
            new_dir = not os.path.isdir(made)
            os.makedirs(made, exist_ok=True)
            open(path, 'w', encoding='utf-8').write(text)
            undo.append(lambda path=path, made=made, new_dir=new_dir:
                        shutil.rmtree(made) if new_dir else os.remove(path))
    return undo


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, '..', '..'))
    failures = []
    rc, out = run_checker(repo)
    if rc != 0:
        failures.append(f'the tree itself does not pass (exit {rc}):\n{out}')
    with tempfile.TemporaryDirectory(prefix='squall-floors-') as tmp:
        copy_tree(repo, tmp)
        rc, out = run_checker(tmp)
        if rc != 0:
            failures.append(f'the copy of the tree does not pass before planting (exit {rc}):\n{out}')
        for what, files, words in PLANTS:
            undo = plant(tmp, files)
            rc, out = run_checker(tmp)
            for u in undo:
                u()
            lines = [line for line in out.splitlines() if all(w in line for w in words)]
            if rc != 1 or not lines:
                failures.append(f'{what}: expected exit 1 and a line naming {words}; got exit {rc}:\n{out}')
            else:
                print(f'caught {what}: {lines[0]}')
        rc, out = run_checker(tmp)
        if rc != 0:
            failures.append(f'the copy does not pass again after the plants were taken out:\n{out}')
    for f in failures:
        print('FAILED: ' + f)
    print(f'floors-planted: {len(PLANTS)} plants, {len(failures)} failure(s)')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())

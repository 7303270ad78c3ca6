#!/usr/bin/env python3
"""The floors of docs/design.md, held against the code.

Reads the table under "## Floors" in docs/design.md (floor, folder, library, namespace, what it
may include) and checks every C++ source in those folders:
  - each `#include "..."` of a squall header names the file's own folder or one its row lists;
  - a row lists only folders on lower floors (the table cannot allow an upward include);
  - each angle include of a guarded third-party header (MPI, HDF5, netCDF, UDUNITS-2, CUDA,
    cuDNN, NCCL, oneDNN, toml++, CLI11, ONNX) is one its row lists;
  - each source folder of the tree has a row, and each row's folder exists;
  - each library's CMakeLists.txt links, of squall's libraries, only its own floor's and
    lower floors' ones.
Prints one line per violation (file:line, the include, the rule) and exits 1; 0 when clean.
Usage: check_floors.py [REPO_ROOT]
"""
import os
import re
import sys

GUARDED = {  # third-party headers whose users the table names, by the include's first path part
    'mpi.h': 'MPI', 'hdf5.h': 'HDF5', 'H5': 'HDF5', 'netcdf.h': 'netCDF', 'cuda': 'CUDA',
    'cublas': 'CUDA', 'cudnn': 'cuDNN', 'nccl.h': 'NCCL', 'dnnl': 'oneDNN', 'oneapi': 'oneDNN',
    'toml++': 'toml++', 'CLI': 'CLI11', 'onnx': 'ONNX', 'udunits2.h': 'UDUNITS-2',
}
SOURCE_EXT = ('.cpp', '.hpp', '.cu', '.cuh', '.h')
TOP_FOLDERS = ('src', 'io', 'mpi', 'cuda')


def guarded_name(include):
    first = include.split('/')[0]
    for prefix, name in GUARDED.items():
        if first == prefix or (first.startswith(prefix) and prefix not in ('mpi.h', 'hdf5.h', 'nccl.h', 'netcdf.h', 'udunits2.h')):
            return name
    return None


def read_table(design):
    text = open(design, encoding='utf-8').read()
    m = re.search(r'^## Floors\n(.*?)(?=^## )', text, re.S | re.M)
    if not m:
        sys.exit(f'{design}: no "## Floors" section')
    rows = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) < 5 or not cells[0].isdigit():
            continue
        folder = cells[1].strip('`').rstrip('/')
        may = cells[4]
        rows[folder] = {
            'floor': int(cells[0]),
            'library': cells[2].strip('`'),
            'includes': set(re.findall(r'`([\w/]+?)/?`', may)),
            'every_lower': 'every lower floor' in may,
            'third_party': set(n for n in set(GUARDED.values()) if re.search(r'(?<![\w+])' + re.escape(n) + r'(?![\w+])', may)),
        }
    if not rows:
        sys.exit(f'{design}: the "## Floors" table has no rows')
    for folder, row in rows.items():  # "every lower floor": the top floor's row
        if row['every_lower']:
            row['includes'] = {f for f, r in rows.items() if r['floor'] < row['floor']}
    return rows


def folder_of(path, folders):
    best = None
    for f in folders:
        if path.startswith(f + '/') and (best is None or len(f) > len(best)):
            best = f
    return best


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..'))
    design = os.path.join(root, 'docs', 'design.md')
    shown = 'docs/design.md'
    rows = read_table(design)
    problems = []
    for folder, row in rows.items():
        if not os.path.isdir(os.path.join(root, folder)):
            problems.append(f'{shown}: the floors name {folder}/, which does not exist')
        for other in row['includes']:
            if other not in rows:
                problems.append(f'{shown}: {folder}/ may include {other}/, which has no floor')
            elif rows[other]['floor'] >= row['floor']:
                problems.append(f'{shown}: {folder}/ (floor {row["floor"]}) may include {other}/ '
                                f'(floor {rows[other]["floor"]}): not a lower floor')
    # every folder of the tree that holds sources has a row
    for top in TOP_FOLDERS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            rel = os.path.relpath(dirpath, root)
            if any(n.endswith(SOURCE_EXT) for n in filenames) and folder_of(rel + '/x', rows) is None:
                problems.append(f'{rel}/: holds sources but has no floor in {shown}')
    checked = 0
    for folder, row in rows.items():
        for dirpath, _, filenames in os.walk(os.path.join(root, folder)):
            for name in sorted(filenames):
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if folder_of(rel, rows) != folder:
                    continue  # a subfolder with its own row
                checked += 1
                for n, line in enumerate(open(path, encoding='utf-8', errors='replace'), 1):
                    m = re.match(r'\s*#\s*include\s*([<"])([^">]+)[">]', line)
                    if not m:
                        continue
                    kind, inc = m.groups()
                    if kind == '"':
                        target = folder_of(inc, rows)
                        if target is None or target == folder or target in row['includes']:
                            continue
                        where = (f'floor {rows[target]["floor"]}, above floor {row["floor"]}'
                                 if rows[target]['floor'] >= row['floor'] else 'not listed in its row')
                        problems.append(f'{rel}:{n}: includes "{inc}" from {target}/ ({where})')
                    else:
                        lib = guarded_name(inc)
                        if lib and lib not in row['third_party']:
                            problems.append(f'{rel}:{n}: includes <{inc}> ({lib}), which {folder}/ may not')
        cmake = os.path.join(root, folder, 'CMakeLists.txt')
        if os.path.exists(cmake):
            libs = {r['library']: (f, r['floor']) for f, r in rows.items() if r['library'].startswith('squall_')}
            text = open(cmake, encoding='utf-8').read()
            for m in re.finditer(r'target_link_libraries\((\w+)([^)]*)\)', text):
                if m.group(1) != row['library']:
                    continue
                for lib in re.findall(r'\bsquall_\w+', m.group(2)):
                    if lib in libs and libs[lib][1] > row['floor']:
                        problems.append(f'{os.path.relpath(cmake, root)}: {row["library"]} (floor {row["floor"]}) '
                                        f'links {lib} (floor {libs[lib][1]})')
    for p in problems:
        print(p)
    print(f'floors: {len(rows)} folders, {checked} sources, {len(problems)} problem(s)')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""The floors of docs/design.md, held against the code.

Reads the table under "## Floors" in docs/design.md (floor, folder, library, namespace, what it
may include) and checks every C++ source in those folders:
  - includes: each include of a squall header, resolved as the compiler does (a quoted include
    from the including file's folder first, then from the repository root; a generated header
    by the folder whose CMakeLists.txt writes it), names the file's own folder or one its row
    lists. An include not written from the root ("tensor.hpp", "../nn/tensor.hpp") is itself
    a problem, and is checked where it resolves as well;
  - third parties: each include of a guarded third-party header (MPI, HDF5, netCDF, UDUNITS-2,
    CUDA, cuDNN, NCCL, oneDNN, toml++, CLI11, ONNX), written with <> or "", is one its row
    lists ("... in `file` alone" allows it in that file of the folder only), and so is each
    one a squall header of another folder brings with it (directly or through its includes);
  - namespaces: each source declares its code in its row's namespace or one nested in it
    (`squall::cuda::detail` is squall::cuda's). An anonymous namespace is the namespace around
    it, so one at file scope is the global namespace; namespace aliases and using-directives
    may stand anywhere; `int main` is the one declaration allowed outside every namespace; a
    file that declares nothing (includes and macros only) passes;
  - the table: a row lists only folders on lower floors, each source folder of the tree has a
    row, and each row's folder exists;
  - links: each target a row's CMakeLists.txt defines links, of squall's libraries, only its
    own folder's and those of the folders its row lists, and of the guarded third parties
    (MPI::, hdf5, netCDF::, UDUNITS-2, CUDA::, cuDNN, NCCL, DNNL::, toml++, CLI11::, ONNX) only
    those its row lists.
Prints one line per violation (file:line, what, the rule) and exits 1; 0 when clean.
Usage: check_floors.py [REPO_ROOT]
"""
import os
import re
import sys

GUARDED = {  # third-party headers whose users the table names, by the include's first path part
    'mpi.h': 'MPI', 'mpi-ext.h': 'MPI', 'mpio.h': 'MPI', 'hdf5.h': 'HDF5', 'hdf5_hl.h': 'HDF5', 'H5': 'HDF5',
    'netcdf.h': 'netCDF', 'netcdf_par.h': 'netCDF', 'netcdf_meta.h': 'netCDF', 'cuda': 'CUDA',
    'cublas': 'CUDA', 'cudnn': 'cuDNN', 'nccl.h': 'NCCL', 'dnnl': 'oneDNN', 'oneapi': 'oneDNN',
    'toml++': 'toml++', 'CLI': 'CLI11', 'onnx': 'ONNX', 'udunits2.h': 'UDUNITS-2',
}
EXACT = ('mpi.h', 'mpi-ext.h', 'mpio.h', 'hdf5.h', 'hdf5_hl.h', 'nccl.h', 'netcdf.h', 'netcdf_par.h', 'netcdf_meta.h',
         'udunits2.h')  # whole names, not prefixes
LINKED = [  # a link item (a target, a library variable) and the third party it is
    (r'^MPI::', 'MPI'), (r'hdf5', 'HDF5'), (r'netcdf', 'netCDF'), (r'udunits', 'UDUNITS-2'),
    (r'^CUDA::', 'CUDA'), (r'cudnn', 'cuDNN'), (r'nccl', 'NCCL'), (r'dnnl|onednn', 'oneDNN'),
    (r'toml', 'toml++'), (r'^CLI11::', 'CLI11'), (r'onnx', 'ONNX'),
]
LINK_KEYWORDS = {'PUBLIC', 'PRIVATE', 'INTERFACE', 'LINK_PUBLIC', 'LINK_PRIVATE', 'LINK_INTERFACE_LIBRARIES'}
SOURCE_EXT = ('.cpp', '.hpp', '.cu', '.cuh', '.h')
TOP_FOLDERS = ('src', 'io', 'mpi', 'cuda')
THIRD_PARTIES = set(GUARDED.values())


def guarded_name(include):
    first = include.split('/')[0]
    for prefix, name in GUARDED.items():
        if first == prefix or (first.startswith(prefix) and prefix not in EXACT):
            return name
    return None


def linked_name(item):
    for pattern, name in LINKED:
        if re.search(pattern, item, re.I):
            return name
    return None


def names_in(text):
    return {n for n in THIRD_PARTIES if re.search(r'(?<![\w+])' + re.escape(n) + r'(?![\w+])', text)}


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
        # namespaces: "`squall::cpu`, and `squall::nn` in `cpu_backend.cpp` alone (why)": the
        # first the folder's, the others allowed in the files named only
        namespaces, ns_only_in = [], {}
        for part in re.split(r'[;,]', re.sub(r'\([^)]*\)', '', cells[3])):
            ns = re.search(r'`([\w:]+)`', part)
            if ns:
                namespaces.append(ns.group(1))
                if re.search(r'\balone\b', part):
                    ns_only_in[ns.group(1)] = set(re.findall(r'`([\w.]+\.\w+)`', part))
        # third parties: "MPI, and CUDA and NCCL in `nccl.cpp` alone": MPI anywhere in the
        # folder, CUDA and NCCL in nccl.cpp only
        third_party, only_in = set(), {}
        for part in re.split(r'[;,]', may):
            found = names_in(re.sub(r'`[^`]*`', '', part))
            alone = set(re.findall(r'`([\w.]+\.\w+)`', part)) if re.search(r'\balone\b', part) else set()
            for n in found:
                third_party.add(n)
                if alone:
                    only_in.setdefault(n, set()).update(alone)
        rows[folder] = {
            'floor': int(cells[0]),
            'library': cells[2].strip('`'),
            'namespace': namespaces[0] if namespaces else None,
            'namespaces': namespaces,
            'ns_only_in': ns_only_in,
            'includes': set(re.findall(r'`([\w/]+?)/?`', may)),
            'every_lower': 'every lower floor' in may,
            'third_party': third_party,
            'only_in': only_in,
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


def allowed_third_party(row, name, file_name):
    return name in row['third_party'] and (name not in row['only_in'] or file_name in row['only_in'][name])


# ---- C++ text: comments, literals and preprocessor lines out, line numbers kept ----

def skip_block_comment(text, i, out):
    """The index after the /* comment at text[i]; its newlines go to `out`."""
    end = text.find('*/', i + 2)
    end = len(text) if end < 0 else end + 2
    out.append('\n' * text.count('\n', i, end))
    return end


def strip_code(text):
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == '#':  # a preprocessor line, with its continuations
            while i < n and text[i] != '\n':
                if text[i] == '\\' and i + 1 < n and text[i + 1] == '\n':
                    out.append('\n')
                    i += 2
                    continue
                if text.startswith('/*', i):
                    i = skip_block_comment(text, i, out)
                    continue
                i += 1
            continue
        if c == '\n':
            out.append(c)
            line_start = True
            i += 1
            continue
        if c in ' \t\r\f\v':
            out.append(c)
            i += 1
            continue
        line_start = False
        if text.startswith('//', i):
            while i < n and text[i] != '\n':
                i += 1
            continue
        if text.startswith('/*', i):
            i = skip_block_comment(text, i, out)
            continue
        if c == '"':
            if i > 0 and text[i - 1] == 'R':  # a raw string: R"delim( ... )delim"
                open_paren = text.find('(', i)
                delim = text[i + 1:open_paren]
                end = text.find(')' + delim + '"', open_paren)
                end = n if end < 0 else end + len(delim) + 2
            else:
                end = i + 1
                while end < n and text[end] != '"' and text[end] != '\n':
                    end += 2 if text[end] == '\\' else 1
                end += 1
            out.append('""' + '\n' * text.count('\n', i, end))
            i = end
            continue
        if c == "'":
            j = len(out) - 1
            while j >= 0 and (out[j].isalnum() or out[j] in '_.'):
                j -= 1
            word = ''.join(out[j + 1:])
            if word and word[0].isdigit():  # a digit separator: 1'000'000
                out.append(c)
                i += 1
                continue
            end = i + 1
            while end < n and text[end] != "'" and text[end] != '\n':
                end += 2 if text[end] == '\\' else 1
            out.append("''")
            i = end + 1
            continue
        out.append(c)
        i += 1
    return ''.join(out)


TOKEN = re.compile(r'[A-Za-z_]\w*|::|""|\S')


def tokens_of(code):
    line = 1
    pos = 0
    for m in TOKEN.finditer(code):
        line += code.count('\n', pos, m.start())
        pos = m.start()
        yield m.group(0), line


def is_forward_declaration(toks, i):
    """Whether the declaration at toks[i] only names a class or enum of that namespace
    (`class Topology;`, `enum class Kind : int;`): a mention, not code."""
    decl = []
    while i < len(toks) and toks[i][0] not in (';', '{', '}'):
        decl.append(toks[i][0])
        i += 1
    if i >= len(toks) or toks[i][0] != ';':
        return False
    if decl[:1] == ['template']:  # template <typename T> class X;
        depth = 0
        for k, t in enumerate(decl):
            depth += {'<': 1, '>': -1}.get(t, 0)
            if t == '>' and depth == 0:
                decl = decl[k + 1:]
                break
    if len(decl) == 2 and decl[0] in ('class', 'struct', 'union'):
        return True
    if decl[:1] == ['enum']:
        rest = decl[2:] if decl[1:2] in (['class'], ['struct']) else decl[1:]
        return len(rest) >= 1 and (len(rest) == 1 or rest[1] == ':')
    return False


def declared_scopes(text):
    """(scope, line) of the first declaration in each namespace scope of `text`: scope is the
    namespace's full name ('' for the global one), anonymous namespaces the one around them."""
    toks = list(tokens_of(strip_code(text)))
    found = {}
    stack = []  # ('ns', name) or ('block', None)

    def scope():
        for kind, name in reversed(stack):
            if kind == 'ns':
                return name
        return ''

    i = 0
    while i < len(toks):
        tok, line = toks[i]
        in_block = stack and stack[-1][0] == 'block'
        if in_block:
            if tok == '{':
                stack.append(('block', None))
            elif tok == '}':
                stack.pop()
            i += 1
            continue
        if tok == '}':
            if stack:
                stack.pop()
            i += 1
            continue
        if tok in (';',):
            i += 1
            continue
        if tok == 'inline' and i + 1 < len(toks) and toks[i + 1][0] == 'namespace':
            i += 1
            continue
        if tok == 'namespace':
            j = i + 1
            parts = []
            while j < len(toks) and toks[j][0] not in ('{', '=', ';'):
                if re.match(r'[A-Za-z_]', toks[j][0]) and toks[j][0] != 'inline':
                    parts.append(toks[j][0])
                j += 1
            if j < len(toks) and toks[j][0] == '{':
                outer = scope()
                name = '::'.join([outer] + parts if outer else parts) if parts else outer
                stack.append(('ns', name))
                i = j + 1
                continue
            while j < len(toks) and toks[j][0] != ';':  # an alias: namespace fs = std::filesystem;
                j += 1
            i = j + 1
            continue
        if tok == 'using' and i + 1 < len(toks) and toks[i + 1][0] == 'namespace':
            while i < len(toks) and toks[i][0] != ';':
                i += 1
            i += 1
            continue
        if tok == 'extern' and i + 2 < len(toks) and toks[i + 1][0] == '""' and toks[i + 2][0] == '{':
            stack.append(('ns', scope()))  # extern "C" { ... }: the scope around it
            i += 3
            continue
        # a declaration at namespace scope: note it, then skip to its end (';' or its body)
        here = scope()
        if not is_forward_declaration(toks, i) and here not in found:
            if not (here == '' and [t for t, _ in toks[i:i + 3]] == ['int', 'main', '(']):
                found[here] = line
        while i < len(toks):
            t = toks[i][0]
            if t == ';':
                i += 1
                break
            if t == '{':
                depth = 1
                i += 1
                while i < len(toks) and depth:
                    depth += {'{': 1, '}': -1}.get(toks[i][0], 0)
                    i += 1
                # a function body ends the declaration; a class body or initializer has ';' next
                if i < len(toks) and toks[i][0] == ';':
                    i += 1
                break
            if t == '}':
                break
            i += 1
    return found


# ---- includes ----

INCLUDE = re.compile(r'\s*#\s*include\s*([<"])([^">]+)[">]')


def read_lines(path):
    return open(path, encoding='utf-8', errors='replace').read().splitlines()


def generated_headers(root, rows):
    """The headers a row's CMakeLists.txt writes with configure_file, by include path."""
    out = {}
    for folder in rows:
        cmake = os.path.join(root, folder, 'CMakeLists.txt')
        if os.path.exists(cmake):
            for m in re.finditer(r'configure_file\(\s*\S+\s+\$\{PROJECT_BINARY_DIR\}/generated/([^\s)]+)',
                                 open(cmake, encoding='utf-8').read()):
                out[m.group(1)] = folder
    return out


class Includes:
    """Where each include of a tree file goes: (line, kind, text, resolved path or None,
    third party or None), and the third parties a header brings with it."""

    def __init__(self, root, rows):
        self.root = root
        self.rows = rows
        self.generated = generated_headers(root, rows)
        self.cache = {}
        self.brought = {}

    def exists(self, rel):
        return os.path.isfile(os.path.join(self.root, rel))

    def resolve(self, rel, kind, inc):
        """The tree path an include names (or a path under a row's folder for a generated
        header that is not in the tree), or None for one outside the tree."""
        if kind == '"':
            local = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            if not local.startswith('..') and self.exists(local):
                return local
        rooted = os.path.normpath(inc)
        if not rooted.startswith('..') and (self.exists(rooted) or folder_of(rooted, self.rows)):
            return rooted
        if inc in self.generated:
            return self.generated[inc] + '/' + os.path.basename(inc)
        return None

    def of(self, rel):
        if rel not in self.cache:
            out = []
            path = os.path.join(self.root, rel)
            if os.path.isfile(path):
                for n, line in enumerate(read_lines(path), 1):
                    m = INCLUDE.match(line)
                    if m:
                        kind, inc = m.groups()
                        target = self.resolve(rel, kind, inc)
                        out.append((n, kind, inc, target, None if target else guarded_name(inc)))
            self.cache[rel] = out
        return self.cache[rel]

    def third_parties(self, rel, seen=None):
        """{third party: (header, through)}: what including `rel` brings, and the tree file
        that includes it."""
        if rel in self.brought:
            return self.brought[rel]
        seen = seen or set()
        seen.add(rel)
        out = {}
        for _, _, inc, target, third in self.of(rel):
            if third:
                out.setdefault(third, (inc, rel))
            elif target and target not in seen:
                for name, how in self.third_parties(target, seen).items():
                    out.setdefault(name, how)
        self.brought[rel] = out
        return out


def include_problems(rel, folder, row, rows, includes):
    problems = []
    name = os.path.basename(rel)
    for n, kind, inc, target, third in includes.of(rel):
        if target is None:
            if third and not allowed_third_party(row, third, name):
                problems.append(f'{rel}:{n}: includes {kind}{inc}{">" if kind == "<" else kind} ({third}), '
                                f'which {folder}/ may not' + (f' (only {", ".join(sorted(row["only_in"][third]))})'
                                                              if third in row['only_in'] else ''))
            elif kind == '"' and not third:
                problems.append(f'{rel}:{n}: includes "{inc}", which is no file from its folder or the '
                                f'repository root: write a squall header from the root ("src/...")')
            continue
        shown = f'{kind}{inc}{">" if kind == "<" else kind}'
        if os.path.normpath(inc) != target and includes.generated.get(inc) is None:
            problems.append(f'{rel}:{n}: includes {shown}, which is {target}: write it from the repository '
                            f'root, "{target}"')
        owner = folder_of(target, rows)
        if owner is None or owner == folder:
            continue
        if owner not in row['includes']:
            where = (f'floor {rows[owner]["floor"]}, above floor {row["floor"]}'
                     if rows[owner]['floor'] >= row['floor'] else 'not listed in its row')
            problems.append(f'{rel}:{n}: includes {shown} from {owner}/ ({where})')
            continue
        for third, (header, through) in sorted(includes.third_parties(target).items()):
            if not allowed_third_party(row, third, name):
                problems.append(f'{rel}:{n}: includes {shown}, which brings <{header}> ({third}, from '
                                f'{through}), which {folder}/ may not')
    return problems


def namespace_problems(root, rel, row):
    expected = row['namespace']
    if not expected:
        return []
    name = os.path.basename(rel)
    allowed = [ns for ns in row['namespaces'] if ns not in row['ns_only_in'] or name in row['ns_only_in'][ns]]
    problems = []
    text = open(os.path.join(root, rel), encoding='utf-8', errors='replace').read()
    for scope, line in sorted(declared_scopes(text).items(), key=lambda s: s[1]):
        if not any(scope == ns or scope.startswith(ns + '::') for ns in allowed):
            problems.append(f'{rel}:{line}: declares code in {scope or "the global namespace"}, not in '
                            f'{expected} (its row\'s namespace) or one nested in it')
    return problems


def link_problems(root, folder, row, rows):
    cmake = os.path.join(root, folder, 'CMakeLists.txt')
    if not os.path.exists(cmake):
        return []
    shown = os.path.relpath(cmake, root)
    text = re.sub(r'#[^\n]*', '', open(cmake, encoding='utf-8').read())
    own = set(re.findall(r'add_(?:library|executable)\(\s*([\w:]+)', text))
    libs = {r['library']: f for f, r in rows.items()}
    problems = []
    for m in re.finditer(r'target_link_libraries\(\s*([\w:]+)([^)]*)\)', text):
        if m.group(1) not in own:
            continue
        line = text.count('\n', 0, m.start()) + 1
        for item in m.group(2).split():
            if item in LINK_KEYWORDS or item in own:
                continue
            if re.fullmatch(r'squall_\w+', item):
                other = libs.get(item)
                if other is None:
                    problems.append(f'{shown}:{line}: {m.group(1)} links {item}, which is no library of the floors')
                elif other != folder and other not in row['includes']:
                    where = (f'floor {rows[other]["floor"]}, above floor {row["floor"]}'
                             if rows[other]['floor'] >= row['floor'] else 'not listed in its row')
                    problems.append(f'{shown}:{line}: {m.group(1)} links {item} of {other}/ ({where})')
                continue
            third = linked_name(item)
            if third and third not in row['third_party']:
                problems.append(f'{shown}:{line}: {m.group(1)} links {item} ({third}), which {folder}/ may not')
    return problems


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..'))
    design = os.path.join(root, 'docs', 'design.md')
    shown = 'docs/design.md'
    rows = read_table(design)
    problems = []
    for folder, row in rows.items():
        if not os.path.isdir(os.path.join(root, folder)):
            problems.append(f'{shown}: the floors name {folder}/, which does not exist')
        if not row['namespace']:
            problems.append(f'{shown}: the row of {folder}/ names no namespace')
        for only in list(row['only_in'].values()) + list(row['ns_only_in'].values()):
            for f in sorted(only):
                if not os.path.isfile(os.path.join(root, folder, f)):
                    problems.append(f'{shown}: the row of {folder}/ names {f}, which is not in {folder}/')
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
    includes = Includes(root, rows)
    checked = 0
    for folder, row in rows.items():
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(SOURCE_EXT):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                if folder_of(rel, rows) != folder:
                    continue  # a subfolder with its own row
                checked += 1
                problems += include_problems(rel, folder, row, rows, includes)
                problems += namespace_problems(root, rel, row)
        problems += link_problems(root, folder, row, rows)
    for p in problems:
        print(p)
    print(f'floors: {len(rows)} folders, {checked} sources, {len(problems)} problem(s)')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

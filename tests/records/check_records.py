"""Reads the records a squall run leaves with the readers their formats belong to: TensorBoard's
own event-file reader, and the mlperf_logging package's parser and compliance checker.

  check_records.py tensorboard DIR
      Every event file in DIR (names holding "tfevents", as TensorBoard picks them), read twice:
      record by record with TensorBoard's record reader, which checks both CRCs of every record
      and fails on a corrupted or cut record, and as TensorBoard's EventAccumulator loads the
      directory (all files merged into one run). Prints one JSON object,
      {tag: [[step, value], ...]}, every scalar sorted by step (values as TensorBoard read them:
      float32 widened; NaN and infinities as Python's json writes them). Fails when a record is
      unreadable, a file does not start with the "brain.Event:2" version record, or the two
      readings disagree.

  check_records.py mllog FILE [--ruleset R]
      FILE parsed by mlperf_logging's parser (mlp_parser.parse_file, ruleset R, default 3.0.0:
      the HPC rules). Prints [[key, value, event_type], ...] in file order. Fails on a line the
      parser refuses, a non-empty line that is not an MLPerf line, or an unknown event_type.

  check_records.py compliance FILE [--usage hpc] [--ruleset 3.0.0]
      mlperf_logging's compliance checker on FILE (it prints its findings); fails when it finds
      anything.

  check_records.py run DIR
      A run dir of `squall train` with run.mllog = true that crashed and was resumed once: its
      TensorBoard scalars against metrics.jsonl (every train loss, learning rate and test
      accuracy at its step, as float32; a step logged by both attempts holds the same value in
      both, the resume being exact), and its MLPerf log against metrics.jsonl and summary.json
      (each attempt opens with init_start and run_start, the job's keys carry the summary's
      values, every evaluation's eval_accuracy is the record's, the last line is run_stop with
      status success).

  check_records.py reshaped DIR
      A run dir of `squall train` with run.mllog = true whose second attempt resumed on another
      number of ranks (docs/training.md, "Elastic resume"): its MLPerf log, read by
      mlperf_logging's parser, has the resumed attempt's squall_shape_change with summary.json's
      attempt.shape_change as its value, and that attempt's number_of_ranks, global_batch_size
      and local_batch_size are the new shape's.

  check_records.py probe DIR
      The test of tests/records/run_records.sh: DIR as squall_records_probe wrote it. Checks the
      tensorboard and mllog readings against the probe's expectations exactly, runs the compliance
      checker on its log, and checks that corrupted, cut and misframed copies are refused.

Exit status: 0 when everything read, 1 otherwise (the reason on stderr), 2 for a usage error.
Needs the tensorboard and mlperf-logging packages (run_records.sh pins their versions).
"""
import json
import math
import os
import shutil
import struct
import sys

VERSION_RECORD = "brain.Event:2"
EVENT_TYPES = ("POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END")


class RecordError(Exception):
    """A record or line the readers refused."""


# ---- TensorBoard ---------------------------------------------------------------------------------

def event_files(dir_):
    if not os.path.isdir(dir_):
        raise RecordError(f"{dir_}: not a directory")
    files = sorted(os.path.join(dir_, f) for f in os.listdir(dir_) if "tfevents" in f)
    if not files:
        raise RecordError(f"{dir_}: no event files (names holding 'tfevents')")
    return files


def strict_events(path):
    """Every Event of one file, through TensorBoard's record reader (the one it uses without
    TensorFlow), which raises DataLossError on a CRC mismatch or a cut record. EventAccumulator
    would stop quietly at such a record (a file being written ends in one), so the test reads
    strictly first."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    events = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            break
        except errors.DataLossError as e:
            raise RecordError(f"record {len(events)}: {e.message}") from None
        event = event_pb2.Event()
        try:
            event.ParseFromString(reader.record())
        except Exception as e:  # protobuf's DecodeError
            raise RecordError(f"{path}: record {len(events)} is no Event: {e}") from None
        events.append(event)
    if not events or events[0].file_version != VERSION_RECORD:
        raise RecordError(f"{path}: the first record is not the version record {VERSION_RECORD!r}")
    return events


def strict_scalars(dir_):
    points = {}
    for path in event_files(dir_):
        for event in strict_events(path)[1:]:
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    points.setdefault(value.tag, []).append([event.step, value.simple_value])
    return points


def accumulated_scalars(dir_):
    """The directory as TensorBoard loads it for its scalar charts."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(dir_, size_guidance={ea.SCALARS: 0})  # 0: keep every value
    acc.Reload()
    return {tag: [[s.step, s.value] for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def accumulated_texts(dir_):
    """The texts TensorBoard's Text tab shows: {tag: [[step, text], ...]} by step, only values whose
    metadata names the "text" plugin and whose tensor is one string."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(dir_, size_guidance={ea.TENSORS: 0})
    acc.Reload()
    texts = {}
    for tag in acc.Tags()["tensors"]:
        if acc.SummaryMetadata(tag).plugin_data.plugin_name != "text":
            raise RecordError(f"{dir_}: tensor {tag!r} is not for the text plugin")
        for t in acc.Tensors(tag):
            if t.tensor_proto.dtype != 7 or len(t.tensor_proto.string_val) != 1:  # DT_STRING
                raise RecordError(f"{dir_}: tensor {tag!r} at step {t.step} is not one string")
            texts.setdefault(tag, []).append([t.step, t.tensor_proto.string_val[0].decode("utf-8")])
    return {tag: sorted(points, key=lambda p: p[0]) for tag, points in texts.items()}


def same_value(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def same_points(a, b):
    return len(a) == len(b) and all(sa == sb and same_value(va, vb) for (sa, va), (sb, vb) in zip(a, b))


def read_tensorboard(dir_):
    strict = strict_scalars(dir_)
    loaded = accumulated_scalars(dir_)
    by_step = {tag: sorted(points, key=lambda p: p[0]) for tag, points in loaded.items()}
    if sorted(strict) != sorted(loaded):
        raise RecordError(f"{dir_}: TensorBoard loaded tags {sorted(loaded)}, the records hold {sorted(strict)}")
    for tag, points in strict.items():
        if not same_points(sorted(points, key=lambda p: p[0]), by_step[tag]):
            raise RecordError(f"{dir_}: tag {tag!r}: TensorBoard loaded {by_step[tag]}, the records hold {points}")
    return by_step


# ---- MLPerf logs ---------------------------------------------------------------------------------

TOKEN = ":::MLLOG "


def read_mllog(path, ruleset="3.0.0"):
    from mlperf_logging.compliance_checker import mlp_parser
    try:
        loglines, errors = mlp_parser.parse_file(path, ruleset=ruleset)
    except (KeyError, TypeError) as e:  # a JSON object without a field the parser takes
        raise RecordError(f"{path}: mlperf_logging's parser failed: {e!r}") from None
    if errors:
        line, why = errors[0]
        raise RecordError(f"{path}: mlperf_logging's parser refused {len(errors)} line(s), first: {why}: {line}")
    with open(path, encoding="latin-1") as f:
        lines = [line for line in f if line.strip()]
    if len(lines) != len(loglines):
        stray = next(line for line in lines if TOKEN not in line)
        raise RecordError(f"{path}: {len(lines) - len(loglines)} line(s) are not MLPerf lines, first: {stray!r}")
    out = []
    for ll in loglines:
        event_type = json.loads(ll.full_string[ll.full_string.index(TOKEN) + len(TOKEN):]).get("event_type")
        if event_type not in EVENT_TYPES:
            raise RecordError(f"{path}: line {ll.lineno + 1}: event_type {event_type!r}")
        out.append([ll.key, ll.value["value"], event_type])
    return out, loglines


def check_compliance(path, usage="hpc", ruleset="3.0.0"):
    from mlperf_logging.compliance_checker import mlp_compliance
    checker = mlp_compliance.make_checker(usage, ruleset, quiet=False, werror=False)
    if not checker.check_file(path, f"{usage}_{ruleset}/common.yaml"):
        raise RecordError(f"{path}: the compliance checker ({usage} {ruleset}) found problems (above)")


# ---- the probe's test ----------------------------------------------------------------------------

def expect_refused(what, fn, *args):
    try:
        fn(*args)
    except RecordError as e:
        print(f"records: {what}: refused ({e})")
        return
    raise RecordError(f"{what}: read without complaint")


def check_probe(dir_):
    tb = os.path.join(dir_, "tb")
    with open(os.path.join(dir_, "expected_tensorboard.json")) as f:
        want = json.load(f)
    got = read_tensorboard(tb)
    if sorted(got) != sorted(want):
        raise RecordError(f"tensorboard: tags {sorted(got)}, expected {sorted(want)}")
    for tag in want:
        if not same_points(got[tag], want[tag]):
            raise RecordError(f"tensorboard: {tag!r}: read {got[tag]}, expected {want[tag]}")
    with open(os.path.join(dir_, "expected_texts.json")) as f:
        want_texts = json.load(f)
    texts = accumulated_texts(tb)
    if texts != want_texts:
        raise RecordError(f"tensorboard: texts {texts}, expected {want_texts}")
    files = event_files(tb)
    if len(files) != 2:
        raise RecordError(f"tensorboard: {len(files)} event files, expected 2 (a run and its resumed attempt)")
    print(f"records: tensorboard: {sum(len(p) for p in got.values())} scalars of {len(got)} tags in "
          f"{len(files)} files read back exactly")

    # Damaged copies of the first file: each must be refused, not read short.
    with open(files[0], "rb") as f:
        good = f.read()
    first_len = int.from_bytes(good[0:8], "little")
    second = 12 + first_len + 4  # where the second record starts
    damaged = {
        "a flipped bit in a record's data": lambda b: flip(b, second + 12 + 2),
        "a flipped bit in a record's length": lambda b: flip(b, second + 3),
        "a flipped bit in a data CRC": lambda b: flip(b, len(b) - 1),
        "a cut last record": lambda b: b[:-3],
    }
    for what, damage in damaged.items():
        copy = os.path.join(dir_, "damaged")
        shutil.rmtree(copy, ignore_errors=True)
        os.makedirs(copy)
        with open(os.path.join(copy, os.path.basename(files[0])), "wb") as f:
            f.write(damage(good))
        expect_refused(f"tensorboard: {what}", read_tensorboard, copy)
        shutil.rmtree(copy)

    log = os.path.join(dir_, "mllog.txt")
    with open(os.path.join(dir_, "expected_mllog.json")) as f:
        want_log = json.load(f)
    got_log, loglines = read_mllog(log)
    if got_log != want_log:
        for i, (g, w) in enumerate(zip(got_log, want_log)):
            if g != w:
                raise RecordError(f"mllog: line {i + 1}: read {g}, expected {w}")
        raise RecordError(f"mllog: {len(got_log)} lines, expected {len(want_log)}")
    times = [ll.timestamp for ll in loglines]
    if times != sorted(times) or times[0] < 1.6e12:
        raise RecordError(f"mllog: time_ms not milliseconds in non-decreasing order: {times}")
    for ll in loglines:
        meta = ll.value["metadata"]
        if meta.get("file") != "tests/records/records_probe.cpp" or not meta.get("lineno", 0) > 0:
            raise RecordError(f"mllog: metadata names no caller: {ll.full_string}")
    print(f"records: mllog: {len(got_log)} lines parsed by mlperf_logging as written")
    check_compliance(log)
    print("records: mllog: the HPC 3.0.0 compliance checker accepts the DeepCAM log")

    with open(log, encoding="latin-1") as f:
        lines = f.readlines()
    broken = os.path.join(dir_, "broken-mllog.txt")
    for what, text in {"a line cut short": lines[:3] + [lines[3][:40] + "\n"],
                       "a line without its prefix": lines[:3] + [lines[3].replace(TOKEN, "")],
                       "a line without a key": lines[:3] + [lines[3].replace('"key"', '"kex"')]}.items():
        with open(broken, "w", encoding="latin-1") as f:
            f.writelines(text)
        expect_refused(f"mllog: {what}", read_mllog, broken)
    # The checker is not vacuous: a run_stop without its status fails it.
    with open(broken, "w", encoding="latin-1") as f:
        for line in lines:
            record = json.loads(line[len(TOKEN):])
            if record["key"] == "run_stop":
                del record["metadata"]["status"]
                line = TOKEN + json.dumps(record) + "\n"
            f.write(line)
    expect_refused("compliance: run_stop without a status", check_compliance, broken)
    os.remove(broken)


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def check_run(dir_):
    with open(os.path.join(dir_, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(dir_, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    if not train or not evals or summary["attempt"]["number"] != 2:
        raise RecordError(f"{dir_}: not a resumed run with train and eval records")

    tb = read_tensorboard(os.path.join(dir_, "tensorboard"))
    if len(event_files(os.path.join(dir_, "tensorboard"))) != 2:
        raise RecordError(f"{dir_}/tensorboard: expected one event file per attempt")
    for tag, kind, field in (("train/loss", train, "loss"), ("train/lr", train, "lr"),
                             ("train/learners", train, "learners"), ("eval/accuracy", evals, "test_accuracy"),
                             ("eval/loss", evals, "test_loss")):
        points = {}
        for step, value in tb.get(tag, []):
            if step in points and not same_value(points[step], value):
                raise RecordError(f"tensorboard: {tag} at step {step}: {points[step]} and {value} in two attempts")
            points[step] = value
        want = {r["step"]: f32(r[field]) for r in kind}
        if points != want:
            raise RecordError(f"tensorboard: {tag}: {sorted(points.items())}, metrics.jsonl has {sorted(want.items())}")
    for tag in ("time/compute_s", "time/allreduce_s", "time/io_wait_s", "time/run_s", "train/samples_per_s"):
        if not tb.get(tag):
            raise RecordError(f"tensorboard: no {tag}")
    # What the run is, once per attempt: the opening lines name the algorithm, the config is all of it.
    texts = accumulated_texts(os.path.join(dir_, "tensorboard"))
    setup, config = texts.get("run/setup", []), texts.get("run/config", [])
    if len(setup) != 2 or len(config) != 2:
        raise RecordError(f"tensorboard: run/setup and run/config once per attempt, got {len(setup)} and {len(config)}")
    algorithm = summary["algorithm"]
    if f", {algorithm}, batch" not in setup[0][1] or f'algorithm = "{algorithm}"' not in config[0][1]:
        raise RecordError(f"tensorboard: run/setup and run/config do not name parallel.algorithm = {algorithm}")
    print(f"records: run: tensorboard's {len(tb)} tags agree with metrics.jsonl "
          f"({len(train)} train and {len(evals)} eval records)")

    log, loglines = read_mllog(os.path.join(dir_, "mlperf.log"))
    keys = [k for k, _, _ in log]
    starts = [i for i, k in enumerate(keys) if k == "init_start"]
    if len(starts) != 2 or starts[0] != 0 or keys.count("run_start") != 2:
        raise RecordError(f"mllog: expected two attempts, each from init_start to run_start: {keys}")
    last = log[starts[1]:]
    values = {k: v for k, v, _ in last}
    want = {"global_batch_size": summary["global_batch"], "local_batch_size": summary["batch_per_learner"],
            "number_of_ranks": summary["world_size"], "number_of_nodes": summary["nodes"],
            "opt_name": summary["optimizer"], "submission_benchmark": summary["model"]}
    for k, v in want.items():
        if values.get(k) != v:
            raise RecordError(f"mllog: {k} = {values.get(k)!r}, summary.json says {v!r}")
    for k in ("seed", "opt_base_learning_rate", "train_samples", "eval_samples", "init_stop"):
        if k not in values:
            raise RecordError(f"mllog: no {k} in the resumed attempt")
    attempt2 = [r for r in evals if r["attempt"] == 2]
    got = [v for k, v, _ in last if k == "eval_accuracy"]
    if got != [r["test_accuracy"] for r in attempt2]:
        raise RecordError(f"mllog: eval_accuracy {got}, metrics.jsonl's attempt 2 has "
                          f"{[r['test_accuracy'] for r in attempt2]}")
    epochs = [ll.value["metadata"].get("epoch_num") for ll in loglines if ll.key == "epoch_start"]
    if not epochs or None in epochs:
        raise RecordError("mllog: epoch_start without epoch_num")
    final = loglines[-1]
    if final.key != "run_stop" or final.value["metadata"].get("status") != "success":
        raise RecordError(f"mllog: the last line is not run_stop with status success: {final.full_string}")
    print(f"records: run: the MLPerf log's {len(log)} lines agree with metrics.jsonl and summary.json")


def check_reshaped(dir_):
    with open(os.path.join(dir_, "summary.json")) as f:
        summary = json.load(f)
    change = summary["attempt"]["shape_change"]
    if not change:
        raise RecordError(f"{dir_}: summary.json has no attempt.shape_change")
    log, _ = read_mllog(os.path.join(dir_, "mlperf.log"))
    keys = [k for k, _, _ in log]
    starts = [i for i, k in enumerate(keys) if k == "init_start"]
    if len(starts) != 2:
        raise RecordError(f"mllog: expected two attempts: {keys}")
    if "squall_shape_change" in keys[:starts[1]]:
        raise RecordError("mllog: the first attempt states a shape change")
    last = {k: v for k, v, _ in log[starts[1]:]}
    if last.get("squall_shape_change") != change:
        raise RecordError(f"mllog: squall_shape_change = {last.get('squall_shape_change')!r}, "
                          f"summary.json's attempt.shape_change is {change!r}")
    want = {"number_of_ranks": change["to"]["ranks"], "global_batch_size": change["to"]["global_batch"],
            "local_batch_size": change["to"]["learner_batch"]}
    for k, v in want.items():
        if last.get(k) != v:
            raise RecordError(f"mllog: {k} = {last.get(k)!r} in the resumed attempt, the new shape has {v!r}")
    print(f"records: reshaped: the MLPerf log states {change['from']['ranks']} -> {change['to']['ranks']} ranks "
          f"at step {change['step']} as summary.json does")


def flip(data, at):
    b = bytearray(data)
    b[at] ^= 0x10
    return bytes(b)


# ---- command line --------------------------------------------------------------------------------

def option(args, name, default):
    if name in args:
        i = args.index(name)
        if i + 1 >= len(args):
            raise SystemExit(f"usage: {name} needs a value")
        value = args[i + 1]
        del args[i:i + 2]
        return value
    return default


def main(argv):
    args = list(argv[1:])
    try:
        ruleset = option(args, "--ruleset", "3.0.0")
        usage = option(args, "--usage", "hpc")
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    if len(args) != 2 or args[0] not in ("tensorboard", "mllog", "compliance", "probe", "run", "reshaped"):
        print(__doc__, file=sys.stderr)
        return 2
    command, path = args
    try:
        if command == "tensorboard":
            print(json.dumps(read_tensorboard(path), sort_keys=True))
        elif command == "mllog":
            print(json.dumps(read_mllog(path, ruleset)[0]))
        elif command == "compliance":
            check_compliance(path, usage, ruleset)
        elif command == "run":
            check_run(path)
        elif command == "reshaped":
            check_reshaped(path)
        else:
            check_probe(path)
    except (RecordError, OSError) as e:
        print(f"check_records: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

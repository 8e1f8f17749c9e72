"""Mini corpora as people have them: a Common Voice release folder and `datasets` folders.

Real audio (tones with a little noise, so they are neither silent nor clipped) encoded by
soundfile: MP3 for Common Voice's clips, FLAC, WAV and MP3 bytes for datasets rows. The parquet and
Arrow files are written with pyarrow in exactly the layout the `datasets` package writes (an audio
column of struct<bytes: binary, path: string>, split-named shards, save_to_disk's dataset_info.json
+ state.json + data-*.arrow stream); the `datasets` package itself is not installed here.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from trainer_core.data.corpus_layout import CorpusOptions
from trainer_core.data.scan import scan_data
from trainer_core.data.scan_report import DataReport, VoiceItem

RATE = 16000
CV_HEADER = (
    "client_id\tpath\tsentence_id\tsentence\tsentence_domain\tup_votes\tdown_votes\tage\tgender\taccents"
    "\tvariant\tlocale\tsegment"
)
SENTENCES = [
    "the cat sat on the mat",
    "a quiet river runs by the town",
    'he said "hello to everyone',  # a lone double quote, as Common Voice has them
    "green fields and old trees",
    "morning light on the hills",
    "people walk slowly every day",
    "birds sing at dawn",
    "the road goes north",
    "a small boat on the lake",
    "rain falls on the roof",
    "children play in the park",
    "the bell rings at noon",
]


def problem_key(problem: dict[str, str]) -> tuple[str, str, str]:
    """(file name, kind, where in the file) of a check-data --json problem."""
    return Path(problem["path"]).name, problem["kind"], problem["reason"].split(":")[0]


def scan(root: Path, tmp_path: Path, **options: object) -> DataReport:
    """`root` scanned as check-data would, with the clips and scan cache under `tmp_path`."""
    corpus = CorpusOptions(**options, clips_dir=tmp_path / "clips")  # type: ignore[arg-type]
    cache = tmp_path / "scan"
    return scan_data(root, "voice", 0.3, 20.0, workers=2, cache_folder=cache, corpus=corpus)


def check_data_json(root: Path, *options: str) -> dict[str, Any]:
    """`trainer-core check-data ROOT --json --items OPTIONS` in a real subprocess; its report."""
    command = [sys.executable, "-m", "trainer_core", "check-data", str(root), "--json", "--items"]
    repo = Path(__file__).resolve().parent.parent
    argv = [*command, *options]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=repo, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def voice_items(report: DataReport) -> list[VoiceItem]:
    return [item for item in report.items if isinstance(item, VoiceItem)]


def clip(index: int, seconds: float = 0.6) -> np.ndarray:
    """A short voiced-sounding clip: a tone whose pitch depends on `index`, with a little noise."""
    t = np.arange(int(RATE * seconds)) / RATE
    rng = np.random.default_rng(index)
    wave = 0.3 * np.sin(2 * np.pi * (140 + 15 * index) * t) + 0.01 * rng.standard_normal(t.size)
    return (wave * np.hanning(t.size) ** 0.2).astype(np.float32)


def encoded(index: int, fmt: str) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, clip(index), RATE, format=fmt)
    return buffer.getvalue()


def cv_row(client: str, name: str, sentence: str, up_votes: int = 2) -> str:
    fields = [
        client,
        name,
        f"s{abs(hash(name)) % 997}",
        sentence,
        "",
        str(up_votes),
        "0",
        "",
        "",
        "",
        "",
        "kmr",
        "",
    ]
    return "\t".join(fields)


def common_voice_folder(root: Path, sentences: list[str] = SENTENCES) -> dict[str, list[str]]:
    """A Common Voice release folder of `sentences` (11 of them); returns the clip names per role
    (train, held_out).

    validated.tsv lists 8 good training clips, the 3 dev/test clips again (they must not train),
    and one row of each problem: a missing clip, an empty sentence, an undecodable clip, a row with
    too few fields, and a row under 2 up-votes. dev.tsv has 2 clips, test.tsv 1; one dev clip is in
    test.tsv too.
    """
    clips = root / "clips"
    clips.mkdir(parents=True)
    names = [f"common_voice_kmr_{n:03d}.mp3" for n in range(16)]
    for n, name in enumerate(names[:13]):
        (clips / name).write_bytes(encoded(n, "MP3"))
    (clips / names[13]).write_bytes(b"ID3 not really an mp3 at all" * 20)  # undecodable
    speakers = ["spk_a", "spk_b"]
    train = names[:8]
    held = names[8:11]
    rows = [cv_row(speakers[n % 2], name, sentences[n]) for n, name in enumerate(train)]
    rows += [cv_row("spk_c", name, sentences[8 + k]) for k, name in enumerate(held)]
    rows += [
        cv_row("spk_a", names[14], "a clip that is not there"),  # missing clip (line 13)
        cv_row("spk_a", names[11], ""),  # empty sentence (line 14)
        cv_row("spk_b", names[13], "this one will not decode"),  # undecodable (line 15)
        "spk_b\tbroken-row\tonly three fields",  # bad row (line 16)
        cv_row("spk_b", names[12], "few votes here", up_votes=1),  # under 2 up-votes (line 17)
    ]
    (root / "validated.tsv").write_text("\n".join([CV_HEADER, *rows]) + "\n", encoding="utf-8")
    dev = [cv_row("spk_c", held[0], sentences[8]), cv_row("spk_c", held[1], sentences[9])]
    test = [cv_row("spk_c", held[2], sentences[10]), cv_row("spk_c", held[0], sentences[8])]
    (root / "dev.tsv").write_text("\n".join([CV_HEADER, *dev]) + "\n", encoding="utf-8")
    (root / "test.tsv").write_text("\n".join([CV_HEADER, *test]) + "\n", encoding="utf-8")
    (root / "train.tsv").write_text("\n".join([CV_HEADER, *rows[:4]]) + "\n", encoding="utf-8")
    (root / "other.tsv").write_text(CV_HEADER + "\n", encoding="utf-8")
    return {"train": train, "held_out": held}


def audio_struct(data: bytes | None, path: str | None) -> dict[str, object]:
    return {"bytes": data, "path": path}


def as_table(rows: list[tuple[dict[str, object], str]], schema: Any) -> Any:
    """Rows of (audio cell, sentence) as an Arrow table with `schema`."""
    import pyarrow as pa

    audio, sentences = [a for a, _ in rows], [s for _, s in rows]
    return pa.table({"audio": audio, "sentence": sentences}, schema=schema)


def parquet_folder(root: Path, sentences: list[str] = SENTENCES) -> None:
    """data/train-0000{0,1}-of-00002.parquet, data/validation-00000-of-00001.parquet and an `other`
    split, as `datasets` writes them: 10 training rows with FLAC, WAV and MP3 bytes, 3 validation
    rows; problem rows: empty text (train-00000 row 2), undecodable bytes (train-00001 row 1), no
    audio at all (train-00001 row 3)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = root / "data"
    data.mkdir(parents=True)
    schema = pa.schema(
        [
            ("audio", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            ("sentence", pa.string()),
        ]
    )
    formats = ["FLAC", "WAV", "MP3"]

    def rows(first: int, count: int) -> list[tuple[dict[str, object], str]]:
        out = []
        for n in range(first, first + count):
            fmt = formats[n % 3]
            out.append(
                (
                    audio_struct(encoded(n, fmt), f"clip_{n}.{fmt.lower()}"),
                    sentences[n % len(sentences)],
                )
            )
        return out

    shard0 = rows(0, 5)
    shard0[2] = (shard0[2][0], "  ")
    shard1 = rows(5, 5)
    shard1[1] = (audio_struct(b"garbage" * 50, "broken.wav"), "this will not decode")
    shard1[3] = (audio_struct(None, None), "no audio here")
    for name, shard in (("train-00000-of-00002", shard0), ("train-00001-of-00002", shard1)):
        pq.write_table(as_table(shard, schema), data / f"{name}.parquet")
    pq.write_table(as_table(rows(10, 3), schema), data / "validation-00000-of-00001.parquet")
    other = data / "other-00000-of-00001.parquet"  # a split that never trains
    pq.write_table(as_table(rows(13, 2), schema), other)


def parquet_path_folder(root: Path) -> None:
    """A parquet file whose audio column holds paths of WAV files; text column: transcription."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wavs = root / "wavs"
    wavs.mkdir(parents=True)
    paths = []
    for n in range(4):
        sf.write(wavs / f"w{n}.wav", clip(n), RATE)
        paths.append(f"wavs/w{n}.wav")
    paths.append("wavs/missing.wav")
    texts = SENTENCES[:5]
    pq.write_table(pa.table({"audio": paths, "transcription": texts}), root / "train.parquet")


def save_to_disk_folder(root: Path) -> None:
    """What `DatasetDict.save_to_disk` writes: dataset_dict.json, and per split dataset_info.json,
    state.json and data-00000-of-00001.arrow (an Arrow IPC stream): struct audio and `text`."""
    import pyarrow as pa

    root.mkdir(parents=True)
    splits = json.dumps({"splits": ["train", "test"]})
    (root / "dataset_dict.json").write_text(splits, encoding="utf-8")
    audio_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    for split, first, count in (("train", 0, 6), ("test", 6, 2)):
        folder = root / split
        folder.mkdir()
        numbers = range(first, first + count)
        audio = [audio_struct(encoded(n, "FLAC"), f"{split}_{n}.flac") for n in numbers]
        texts = [SENTENCES[n] for n in numbers]
        table = pa.table({"audio": pa.array(audio, type=audio_type), "text": texts})
        arrow = folder / "data-00000-of-00001.arrow"
        with pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=4)
        (folder / "dataset_info.json").write_text(json.dumps({"features": {}}), encoding="utf-8")
        state = {"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": split}
        (folder / "state.json").write_text(json.dumps(state), encoding="utf-8")

#!/usr/bin/env bash
# Build the bundled demo voice corpus: short English sentences synthesised with espeak-ng, converted
# with sox to 16-bit mono 22050 Hz WAV, plus an LJSpeech metadata.csv and a README.
# Re-runnable: the sentence list below is fixed and every output is overwritten.
# Needs: espeak-ng, sox (apt-get install -y espeak-ng sox).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/trainer_core/demo/voice"
RATE=22050

for tool in espeak-ng sox; do
    command -v "$tool" >/dev/null || { echo "error: $tool not found; apt-get install -y espeak-ng sox" >&2; exit 2; }
done

# text|normalized text (numbers and abbreviations spelled out as they are spoken).
SENTENCES=$(cat <<'EOF'
The sun is warm today.|The sun is warm today.
Please close the door.|Please close the door.
The cat sleeps on the mat.|The cat sleeps on the mat.
We walked to the river.|We walked to the river.
It costs 5 dollars.|It costs five dollars.
Dr. Lee is here.|Doctor Lee is here.
The train leaves at 9.|The train leaves at nine.
Rain fell all night.|Rain fell all night.
She reads a short book.|She reads a short book.
Open the window, please.|Open the window, please.
The bread is fresh.|The bread is fresh.
My phone is on the desk.|My phone is on the desk.
Birds sing at dawn.|Birds sing at dawn.
He drinks black coffee.|He drinks black coffee.
The road is long.|The road is long.
We have 3 red apples.|We have three red apples.
Turn left at the corner.|Turn left at the corner.
The sky is clear.|The sky is clear.
Mr. Brown likes tea.|Mister Brown likes tea.
The lamp is too bright.|The lamp is too bright.
Snow covers the hills.|Snow covers the hills.
Call me after lunch.|Call me after lunch.
The dog ran home.|The dog ran home.
I found my keys.|I found my keys.
The shop opens at 8.|The shop opens at eight.
Green leaves turn gold.|Green leaves turn gold.
This song is new.|This song is new.
The boat is slow.|The boat is slow.
Wait for the bus.|Wait for the bus.
The soup is hot.|The soup is hot.
She has 2 brothers.|She has two brothers.
Wind moves the trees.|Wind moves the trees.
The clock ticks softly.|The clock ticks softly.
Bring a warm coat.|Bring a warm coat.
The room is quiet.|The room is quiet.
Fish swim in the lake.|Fish swim in the lake.
Let us begin now.|Let us begin now.
The stars are bright.|The stars are bright.
He paints the fence.|He paints the fence.
Good night, and thank you.|Good night, and thank you.
EOF
)

VOICES=(en-us en-gb)
SPEEDS=(150 158 166 175)

rm -rf "$OUT/wavs"
mkdir -p "$OUT/wavs"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

: > "$OUT/metadata.csv"
i=0
while IFS='|' read -r text normalized; do
    i=$((i + 1))
    id=$(printf 'demo_%03d' "$i")
    voice=${VOICES[$(( (i - 1) % ${#VOICES[@]} ))]}
    speed=${SPEEDS[$(( (i - 1) / ${#VOICES[@]} % ${#SPEEDS[@]} ))]}
    espeak-ng -v "$voice" -s "$speed" -w "$TMP/raw.wav" "$text"
    # Trim leading/trailing silence, pad a little back, peak-normalise to -3 dBFS; -R and -D keep output identical
    # across runs (fixed seed, no dither).
    sox -R -q "$TMP/raw.wav" -D -b 16 -c 1 -r "$RATE" "$OUT/wavs/$id.wav" \
        silence 1 0.02 -45d reverse silence 1 0.02 -45d reverse pad 0.08 0.12 gain -n -3
    printf '%s|%s|%s\n' "$id" "$text" "$normalized" >> "$OUT/metadata.csv"
done <<< "$SENTENCES"

cat > "$OUT/README.md" <<EOF
# Demo voice corpus

$i short English sentences synthesised with espeak-ng $(espeak-ng --version | sed -E 's/^[^:]*: *([0-9.]+).*/\1/'),
alternating the en-us and en-gb voices at 150-175 words per minute, then trimmed, padded and
peak-normalised with sox into 16-bit mono ${RATE} Hz WAV files under \`wavs/\`.

\`metadata.csv\` is LJSpeech style: \`id|text|normalized text\` (numbers and abbreviations spelled out
in the third column). It exists so that Vega's default profile trains out of the box; a model trained
on it only shows that the pipeline works.

Rebuild it with \`scripts/make_demo_voice.sh\` (needs espeak-ng and sox); the output is deterministic.

Licence: generated for this project by that script and distributed under the project's MIT licence.
The sentences were written for it; the audio is machine-synthesised, no recorded voice is included.
espeak-ng itself (GPL-3.0) is not part of this folder.
EOF

echo "wrote $i clips to $OUT ($(du -sh "$OUT" | cut -f1))"

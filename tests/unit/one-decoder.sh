#!/usr/bin/env bash
# Text is decoded in one place, the gpu-worker (docs/adr/0025): the front
# door and the clients print the text the worker sends and check no stop
# string. Fails, naming the file and line, when a source of supervisor/ or
# client/ includes the tokenizer, calls its decoder or stop strings, or
# guesses the byte-level tokenizer from the vocabulary or its ids (a token
# below 256 taken for a byte, as the door's own stop strings once did).
# One file is fenced apart: supervisor/tokenize.c reads the model's
# tokenizer for /tokenize, /detokenize and count_tokens (docs/adr/0058),
# never a generation's text; it may encode and name pieces, and it too may
# not touch the stream decoder or stop strings.
#   one-decoder.sh SOURCE_ROOT
set -uo pipefail
root=${1:?usage: one-decoder.sh SOURCE_ROOT}
cd "$root" || exit 1

bad=0
for f in supervisor/*.[ch] client/*.[ch]; do
	[[ -f $f ]] || continue
	if [[ $f == supervisor/tokenize.[ch] ]]; then
		while IFS= read -r hit; do
			echo "FAIL: $f:$hit: the supervisor's tokenizer encodes; it decodes no generation" >&2
			bad=1
		done < <(grep -nE '\btok_(stream|decode|text|stops)_?[a-z_]*\(|\bTOK_(STREAM_MAX_OUT|SKIP_SPECIAL)\b' "$f")
		continue
	fi
	while IFS= read -r hit; do
		echo "FAIL: $f:$hit: the front door and the clients decode nothing" >&2
		bad=1
	done < <(grep -nE '#include "(model/)?tokenizer\.h"|\btok_(stream|decode|encode|text|stops)_?[a-z_]*\(|\bTOK_(VOCAB|EOS|BOS|STREAM_MAX_OUT|SKIP_SPECIAL)\b|vocab == 260|== *"byte"|\b(tok|id|ids\[[^]]*\]) *[<>]=? *256\b' "$f")
done
((bad)) && exit 1
echo "one-decoder: supervisor/ and client/ decode no token"

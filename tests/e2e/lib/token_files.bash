# Helpers for the e2e scripts: llm.c token files written with printf only (no Python needed).

le32() {  # little-endian bytes of a 32-bit integer, as \xHH escapes
  local n=$1
  printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((n & 255)) $(((n >> 8) & 255)) $(((n >> 16) & 255)) $(((n >> 24) & 255))
}
le16() {
  printf '\\x%02x\\x%02x' $(($1 & 255)) $((($1 >> 8) & 255))
}
# write_tokens FILE MAGIC VERSION COUNT TOKEN...: an llm.c token file (256 int32 header).
write_tokens() {
  local file=$1 magic=$2 version=$3 count=$4 body=""
  shift 4
  for t in "$@"; do body+=$(le16 "$t"); done
  { printf '%b' "$(le32 "$magic")$(le32 "$version")$(le32 "$count")"
    head -c $((253 * 4)) /dev/zero
    printf '%b' "$body"
  } > "$file"
}

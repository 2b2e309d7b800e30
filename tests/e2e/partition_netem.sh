#!/usr/bin/env bash
# partition.sh with 100% packet loss (tc netem) instead of a link going down: the link stays up,
# nothing reaches the other side. Usage: partition_netem.sh BIN_DIR SOURCE_DIR
exec bash "$(dirname "$0")/partition.sh" "$1" "$2" netem

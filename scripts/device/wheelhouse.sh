#!/usr/bin/env bash
# Downloads into .whl/ the wheels a lent accelerator machine lacks for livegen's GPU paths
# (scripts/device/wheels.txt), for CPython 3.12 on manylinux x86-64: the device image's Python.
# Run it where a package registry is reachable; the machine itself reaches none. Nothing the
# image already has (torch, transformers, numpy, CUDA libraries: image.txt) is fetched, and each
# wheel comes without its dependencies (--no-deps): wheels.txt names every one the image lacks.
#
#   scripts/device/wheelhouse.sh [DEST]       DEST defaults to .whl (git-ignored)
#
# WHEEL_PYTHON=3.11 fetches the same list for another interpreter (CI's dry run does, for its own).
set -euo pipefail
cd "$(dirname "$0")/../.."

dest="${1:-.whl}"
python_version="${WHEEL_PYTHON:-3.12}"
limit_mib=60
mkdir -p "$dest"
# Every manylinux tag a cp312 x86-64 wheel is published under (pip matches each tag exactly).
platforms=()
for tag in manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 \
    manylinux_2_28_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64; do
    platforms+=(--platform "$tag")
done
# A wheel of another version left from an earlier list would make two of one package: start clean.
rm -f "$dest"/*.whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --implementation cp \
    --python-version "$python_version" "${platforms[@]}" -d "$dest" -r scripts/device/wheels.txt

size_kib=$(du -sk "$dest" | cut -f1)
echo "wheelhouse: $(ls "$dest"/*.whl | wc -l) wheels, $((size_kib / 1024)) MiB in $dest (python $python_version)"
if [ "$size_kib" -gt $((limit_mib * 1024)) ]; then
    echo "wheelhouse: over $limit_mib MiB: the device tool carries 64 MiB in all" >&2
    exit 1
fi

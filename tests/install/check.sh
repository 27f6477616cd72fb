#!/bin/sh
# The install tree as a user meets it: `cmake --install` into a fresh prefix,
# then examples/basic.c built twice against it, once through find_package(sdpa)
# and once through pkg-config, and both programs run (they exit non-zero if
# the library misbehaves). Usage: check.sh <build dir> <source dir>
set -eu
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"

mkdir "$work/consumer"
cp "$src/examples/basic.c" "$work/consumer/"
cat > "$work/consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(sdpa REQUIRED)
add_executable(basic basic.c)
target_link_libraries(basic PRIVATE sdpa::sdpa m)
add_executable(basic_static basic.c)
target_link_libraries(basic_static PRIVATE sdpa::sdpa_static m)
CM
cmake -S "$work/consumer" -B "$work/consumer/build" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/cfg.log"
cmake --build "$work/consumer/build" > "$work/build.log"
LD_LIBRARY_PATH="$work/prefix/lib" "$work/consumer/build/basic" > /dev/null
echo "find_package(sdpa) consumer, shared: ok"
"$work/consumer/build/basic_static" > /dev/null
echo "find_package(sdpa) consumer, static: ok"
n=2

if command -v pkg-config > /dev/null; then
  pc() { PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config "$@" sdpa; }
  ${CC:-cc} "$src/examples/basic.c" $(pc --cflags --libs) -lm -o "$work/basic_pc"
  LD_LIBRARY_PATH="$work/prefix/lib" "$work/basic_pc" > /dev/null
  echo "pkg-config consumer, shared: ok"
  # libsdpa.a itself (-lsdpa would take the .so), with the private libraries
  libs=$(pc --static --libs | sed "s#-lsdpa#$work/prefix/lib/libsdpa.a#")
  ${CC:-cc} "$src/examples/basic.c" $(pc --cflags) $libs -lm -o "$work/basic_pc_static"
  "$work/basic_pc_static" > /dev/null
  echo "pkg-config consumer, static: ok"
  n=4
fi
echo "$n passed, 0 failed"

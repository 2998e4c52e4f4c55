#!/usr/bin/env bash
# Sourced (not run) by scripts/gpu_check.sh and scripts/torch_gpu_check.sh on
# a machine without network access and without the C++ build dependencies
# (the GPU machine): when FCP_GPU_DEPS names a folder of .deb files made by
# scripts/gpu_build_deps.sh, unpacks them (dpkg -x, never into /) into the
# private prefix "$1" and exports what CMake, pkg-config, the compiler
# wrappers and the loader need to use them: OpenBLAS through its .pc file,
# nlohmann-json / fmt / CLI11 / GoogleTest through CMAKE_PREFIX_PATH, and
# Open MPI relocated with OPAL_PREFIX (its mpicxx wrapper named to CMake in
# FCP_GPU_CMAKE_ARGS). Without FCP_GPU_DEPS it does nothing.
# Returns non-zero, after one line on stderr, when the folder is unusable.
gpu_deps_env() {
  local prefix="$1"
  [ -n "${FCP_GPU_DEPS:-}" ] || return 0
  if ! compgen -G "$FCP_GPU_DEPS/*.deb" >/dev/null; then
    echo "gpu_deps_env: FCP_GPU_DEPS=$FCP_GPU_DEPS holds no .deb files (make them with scripts/gpu_build_deps.sh)" >&2
    return 1
  fi
  local deb
  for deb in "$FCP_GPU_DEPS"/*.deb; do
    dpkg -x "$deb" "$prefix" || { echo "gpu_deps_env: dpkg -x $deb failed" >&2; return 1; }
  done
  local usr="$prefix/usr" arch_lib="$prefix/usr/lib/x86_64-linux-gnu"
  local blas="$arch_lib/openblas-pthread"
  # The .pc names /usr; point it at the prefix.
  sed -i "s|^libdir=.*|libdir=$blas/|; s|^includedir=.*|includedir=$usr/include/x86_64-linux-gnu/openblas-pthread/|" \
    "$blas/pkgconfig/openblas.pc"
  export CMAKE_PREFIX_PATH="$usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PKG_CONFIG_PATH="$blas/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$blas:$arch_lib:$arch_lib/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG="$usr/bin/pkgconf" PATH="$usr/bin:$PATH"
  if [ -x "$usr/bin/opal_wrapper" ]; then
    # Debian names the wrappers mpicxx.openmpi (the plain names are
    # alternatives links in /etc); the wrapper reads its role from its name.
    ln -sf opal_wrapper "$usr/bin/mpicxx"
    ln -sf opal_wrapper "$usr/bin/mpicc"
    ln -sf orterun "$usr/bin/mpirun"
    export OPAL_PREFIX="$usr"
    # FindMPI prefers a wrapper it finds elsewhere; name this one.
    export FCP_GPU_CMAKE_ARGS="-DMPI_CXX_COMPILER=$usr/bin/mpicxx"
  fi
}

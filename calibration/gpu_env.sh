# Sourced by calibration/gpu_session.sh and gpu_calibrate.sh on a GPU machine that has CUDA but none of
# hetsim's other dependencies: unpacks the Debian packages in $dir/deb into /opt/hetsim-dep, puts their
# libraries, NCCL's and CUDA's on the loader's path and Open MPI's programs (and $dir's) on PATH, and checks
# that each binary named in $binaries finds every library it needs. Expects `dir` and `binaries` set.
echo "== dependencies"
dep=/opt/hetsim-dep
mkdir -p "$dep"
for d in "$dir"/deb/*.deb; do dpkg -x "$d" "$dep"; done
nccl=$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)
echo "NCCL: $nccl"
export LD_LIBRARY_PATH="$dep/usr/lib/x86_64-linux-gnu:$dep/usr/lib/x86_64-linux-gnu/openmpi/lib:$dep/usr/lib:${nccl:+$(dirname "$nccl"):}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export OPAL_PREFIX="$dep/usr" PATH="$dir:$dep/usr/bin:$PATH"
export PMIX_MCA_pcompress_base_silence_warning=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
for b in $binaries; do
  chmod +x "$dir/$b"
  ldd "$dir/$b" | grep "not found" && echo "$b: missing libraries"
done

# Cross-compiling PhaseKV's CPU configuration for 64-bit Arm Linux (Jetson Orin / Thor CPUs)
# with Debian's cross compiler and arm64 multiarch libraries (scripts/install-deps.sh --cross).
# Tests run under qemu-aarch64 through CMAKE_CROSSCOMPILING_EMULATOR (the build machine has no
# binfmt_misc, so an aarch64 binary can't be executed directly).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# find_package() looks in /usr/lib/aarch64-linux-gnu/cmake/* (multiarch), never the host's.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_IGNORE_PATH /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/cmake)
# pkg-config (PCRE2) must read the arm64 .pc files.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")

# The emulator runs the binaries against the arm64 multiarch runtime (libc6:arm64: its
# /lib/ld-linux-aarch64.so.1 and /usr/lib/aarch64-linux-gnu/libc.so.6, both of one glibc build),
# never with `-L /usr/aarch64-linux-gnu`: that prefix gives the cross toolchain's loader
# (libc6-arm64-cross 2.36-8cross1) while the host's ld.so.cache still resolves libc.so.6 to the
# multiarch build (2.36-9+deb12u14), and a loader and libc of two builds make the first
# pthread_create of a dynamically linked program spin forever (`run -t 2` never finished).
find_program(PHASEKV_QEMU_AARCH64 qemu-aarch64)
if(PHASEKV_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${PHASEKV_QEMU_AARCH64})
endif()

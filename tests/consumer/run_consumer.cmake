# Installs a PhaseKV build into a fresh prefix and uses it as an outside project would
# (examples/consumer), checking the package on the way. Run by ctest (`installed_package`):
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK=... -DGENERATOR=... -DGGUF=tiny.gguf
#         -DEXAMPLE=<in-tree example_generate> -DNM=... -DREADELF=... -DCC=... -DVERSION=...
#         -DSOVERSION=... -DCUDA=ON|OFF [-DTOOLCHAIN=...] [-DEMULATOR="qemu-aarch64"]
#         -P run_consumer.cmake
# 1. cmake --install into WORK/prefix: headers, libphasekv.so (versioned SONAME), libphasekv.a,
#    the tool, the CMake package, the pkg-config file;
# 2. libphasekv.so exports exactly the functions phasekv.h declares (nm -D), nothing else;
# 3. examples/consumer configures against the prefix (find_package(PhaseKV CONFIG), the CUDA
#    component when built with it), builds consumer_c / consumer_cpp / consumer_static, and a
#    fourth binary is compiled from the pkg-config line alone;
# 4. the installed tool converts the tiny model, and all four consumers print exactly what the
#    in-tree example (static archives) prints for the same model and prompt.
separate_arguments(_emu UNIX_COMMAND "${EMULATOR}")
set(prefix ${WORK}/prefix)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run_checked what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
endfunction()

run_checked("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/phasekv.h include/phasekv.hpp lib/libphasekv.so lib/libphasekv.so.${SOVERSION}
          lib/libphasekv.a bin/phasekv lib/cmake/PhaseKV/PhaseKVConfig.cmake
          lib/cmake/PhaseKV/PhaseKVConfigVersion.cmake lib/cmake/PhaseKV/PhaseKVTargets.cmake
          lib/pkgconfig/phasekv.pc)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
message(STATUS "installed into ${prefix}")

# SONAME and exported symbols.
run_checked("readelf -d" ${READELF} -d ${prefix}/lib/libphasekv.so)
if(NOT last_out MATCHES "Library soname: \\[libphasekv\\.so\\.${SOVERSION}\\]")
  message(FATAL_ERROR "SONAME is not libphasekv.so.${SOVERSION}:\n${last_out}")
endif()
run_checked("nm -D" ${NM} -D --defined-only ${prefix}/lib/libphasekv.so)
string(REGEX MATCHALL "[^\n]+" lines "${last_out}")
set(exported)
foreach(l IN LISTS lines)
  if(l MATCHES "^[0-9a-fA-F]+ A PHASEKV_")  # the version node
    continue()
  endif()
  if(NOT l MATCHES "^[0-9a-fA-F]+ [TDBRVW] (.+)$")
    message(FATAL_ERROR "unexpected nm line: ${l}")
  endif()
  string(REGEX REPLACE "@.*" "" sym "${CMAKE_MATCH_1}")
  if(NOT sym MATCHES "^pkv_")
    message(FATAL_ERROR "libphasekv.so exports ${sym}, which is not part of the C API")
  endif()
  list(APPEND exported ${sym})
endforeach()
file(READ ${prefix}/include/phasekv.h header)
string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" header "${header}")  # drop comments
string(REGEX MATCHALL "pkv_[a-z0-9_]+\\(" declared "${header}")
list(TRANSFORM declared REPLACE "\\($" "")
list(REMOVE_DUPLICATES declared)
list(SORT declared)
list(SORT exported)
if(NOT declared STREQUAL exported)
  message(FATAL_ERROR "exported symbols differ from phasekv.h's functions:\n  exported: ${exported}\n  declared: ${declared}")
endif()
list(LENGTH exported n)
message(STATUS "libphasekv.so.${SOVERSION} exports the ${n} functions of phasekv.h and nothing else")

# The outside project, through the CMake package.
set(cfg -S ${SOURCE_DIR}/examples/consumer -B ${WORK}/build -G ${GENERATOR}
        -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
if(TOOLCHAIN)
  list(APPEND cfg -DCMAKE_TOOLCHAIN_FILE=${TOOLCHAIN})
endif()
if(CUDA)
  list(APPEND cfg -DPHASEKV_REQUIRE_CUDA=ON)
endif()
run_checked("configure examples/consumer" ${CMAKE_COMMAND} ${cfg})
if(NOT last_out MATCHES "PhaseKV ${VERSION} from ${prefix}")
  message(FATAL_ERROR "the consumer did not find the installed PhaseKV ${VERSION}:\n${last_out}")
endif()
run_checked("build examples/consumer" ${CMAKE_COMMAND} --build ${WORK}/build)

# The pkg-config route: flags from phasekv.pc only.
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
run_checked("pkg-config" pkg-config --modversion phasekv)
string(STRIP "${last_out}" pc_version)
if(NOT pc_version STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config says PhaseKV ${pc_version}, expected ${VERSION}")
endif()
run_checked("pkg-config" pkg-config --cflags --libs phasekv)
separate_arguments(pc_flags UNIX_COMMAND "${last_out}")
run_checked("${CC} with pkg-config's flags" ${CC} ${SOURCE_DIR}/examples/generate.c -o ${WORK}/consumer_pkgconfig
            ${pc_flags} -Wl,-rpath,${prefix}/lib)

# Same tokens whichever way the library is linked.
set(model ${WORK}/tiny.pkv)
run_checked("installed phasekv convert" ${_emu} ${prefix}/bin/phasekv convert ${GGUF} ${model} --force)
run_checked("in-tree example" ${_emu} ${EXAMPLE} ${model} " the" 8)
set(want "${last_out}")
if(NOT want MATCHES "tokens in context")
  message(FATAL_ERROR "the in-tree example printed no continuation:\n${want}")
endif()
foreach(exe build/consumer_c build/consumer_cpp build/consumer_static consumer_pkgconfig)
  run_checked(${exe} ${_emu} ${WORK}/${exe} ${model} " the" 8)
  if(NOT last_out STREQUAL want)
    message(FATAL_ERROR "${exe} printed\n${last_out}\nthe in-tree example\n${want}")
  endif()
  message(STATUS "${exe}: same output as the in-tree example")
endforeach()
message(STATUS "installed package OK")

# Converts the tiny fixture and runs the embedding example on it.
# EMULATOR (optional, space-separated): runs the binaries of a cross build (qemu-aarch64 ...).
separate_arguments(_emu UNIX_COMMAND "${EMULATOR}")
execute_process(COMMAND ${_emu} ${PHASEKV} convert ${GGUF} ${OUT} --force RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "phasekv convert failed: ${rc}")
endif()
execute_process(COMMAND ${_emu} ${EXAMPLE} ${OUT} ${ARGS} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "example failed: ${rc}")
endif()

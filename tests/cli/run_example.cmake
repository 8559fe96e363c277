# Converts the tiny fixture and runs the embedding example on it.
execute_process(COMMAND ${PHASEKV} convert ${GGUF} ${OUT} --force RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "phasekv convert failed: ${rc}")
endif()
execute_process(COMMAND ${EXAMPLE} ${OUT} ${ARGS} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "example failed: ${rc}")
endif()

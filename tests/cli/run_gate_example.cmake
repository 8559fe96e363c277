# The C release-gate example (examples/selftest_gate.c) on a compressed tiny model with
# SmolLM2's vocabulary and random weights: retrieval fails everywhere, so a min-accuracy gate
# of 0.5 must fail (exit 3) and gates at 0 / 1 must pass (exit 0), each printing its verdict.
# EMULATOR (optional, space-separated): runs the binaries of a cross build (qemu-aarch64 ...).
separate_arguments(_emu UNIX_COMMAND "${EMULATOR}")
if(NOT EXISTS ${GGUF})
  message("skipped: no ${GGUF}")
  return()
endif()
execute_process(COMMAND ${_emu} ${PHASEKV} convert ${GGUF} ${OUT} --force
                        --kv 1-2:compressed:W=4,S=4,L=8,gate=uniform RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "phasekv convert failed: ${rc}")
endif()
# The deployed template: a chat turn written out (the tiny model carries no chat template).
file(WRITE ${OUT}.template "<|im_start|>user\nField notes:\n{{content}}<|im_end|>\n<|im_start|>assistant\n")
foreach(case "0.5;0.3;3;gate min_acc: FAIL" "0;1;0;gate max_gap: pass")
  list(GET case 0 min_acc)
  list(GET case 1 max_gap)
  list(GET case 2 want_rc)
  list(GET case 3 want_text)
  execute_process(COMMAND ${_emu} ${EXAMPLE} ${OUT} ${OUT}.template ${min_acc} ${max_gap} 4 96
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}")
  if(NOT rc EQUAL want_rc)
    message(FATAL_ERROR "gate ${min_acc}/${max_gap}: exit ${rc}, want ${want_rc}\n${err}")
  endif()
  string(FIND "${out}" "${want_text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "gate ${min_acc}/${max_gap}: no '${want_text}' in the output")
  endif()
  string(FIND "${out}" "compression costs" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "gate ${min_acc}/${max_gap}: no control figure in the output")
  endif()
endforeach()
file(REMOVE ${OUT} ${OUT}.template)

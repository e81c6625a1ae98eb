# Run by ctest (tests/install/CMakeLists.txt) as cmake -P with KILN_BUILD_DIR,
# KILN_EXAMPLE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER, CXX_LAUNCHER.
cmake_minimum_required(VERSION 3.25)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${what} failed (exit ${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(example_build ${WORK_DIR}/custom_module-build)
file(REMOVE_RECURSE ${prefix} ${example_build})

run("cmake --install" ${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${prefix})
foreach(f include/kiln/kiln.h lib/libkiln.a bin/kiln lib/cmake/kiln/kilnConfig.cmake
          lib/cmake/kiln/kilnConfigVersion.cmake lib/cmake/kiln/kilnTargets.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "install test: ${prefix}/${f} was not installed")
  endif()
endforeach()

set(configure_args -S ${KILN_EXAMPLE_DIR} -B ${example_build} -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
if(CXX_LAUNCHER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER})
endif()
run("configuring examples/custom_module" ${CMAKE_COMMAND} ${configure_args})
run("building examples/custom_module" ${CMAKE_COMMAND} --build ${example_build})
run("custom_module --steps 5" ${example_build}/custom_module --steps 5 --data fashion-mnist)
message("${last_output}")

# Five steps, each with a finite loss, and the final line.
string(REGEX MATCHALL "step [0-9]+/5 loss [0-9]+\\.[0-9]+" steps "${last_output}")
list(LENGTH steps n)
if(NOT n EQUAL 5)
  message(FATAL_ERROR "install test: expected 5 'step i/5 loss X' lines with finite losses, got ${n}:\n${last_output}")
endif()
if(NOT last_output MATCHES "losses finite")
  message(FATAL_ERROR "install test: custom_module did not report its losses finite:\n${last_output}")
endif()

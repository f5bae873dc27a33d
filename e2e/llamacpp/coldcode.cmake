# Included by build.sh after llama.cpp's project() (CMAKE_PROJECT_INCLUDE);
# both changes below are measured in bench/README.md, "CI time".
include_guard(GLOBAL)

# The code llama-server links but the tests never run, built without
# optimisation: mtmd, the multimodal library (image and audio encoders and
# their decoders), which the server runs only with --mmproj, never passed
# here; llama-quant.cpp, model quantisation (llama-quantize's, not the
# server's). The hot code (ggml and its CPU kernels, llama's graph and
# sampling, the server's loop) keeps Release's -O3: a build at -O1 made an
# engine 0.7x as fast, and the checks that ride on its pace flaked.
function(vigil_cold_code)
  target_compile_options(mtmd PRIVATE -O0)
  set_source_files_properties("${CMAKE_SOURCE_DIR}/src/llama-quant.cpp"
    DIRECTORY "${CMAKE_SOURCE_DIR}/src" PROPERTIES COMPILE_OPTIONS -O0)
endfunction()

# build.sh builds with CMAKE_UNITY_BUILD (a library's sources compiled a
# batch at a time, so the heavy headers, JSON's above all, are parsed once
# a batch, as llama.cpp already does for its model graphs). Three sources
# do not compile in a batch: mtmd-helper*.cpp refuse mtmd's internal
# headers, which a batch brings in; common/json.cpp specialises templates
# its batch has already instantiated.
function(vigil_unity_skips)
  set_source_files_properties(
    "${CMAKE_SOURCE_DIR}/tools/mtmd/mtmd-helper.cpp" "${CMAKE_SOURCE_DIR}/tools/mtmd/mtmd-helper-gen.cpp"
    DIRECTORY "${CMAKE_SOURCE_DIR}/tools/mtmd" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  set_source_files_properties("${CMAKE_SOURCE_DIR}/common/json.cpp"
    DIRECTORY "${CMAKE_SOURCE_DIR}/common" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()

# Deferred to the end of the top directory, once every target exists.
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL vigil_cold_code)
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL vigil_unity_skips)

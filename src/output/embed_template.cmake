# Build-time step: wraps an HTML template in a C++ raw string so the template stays editable as
# HTML and edits rebuild the library. Usage: cmake -DINPUT=x.html -DOUTPUT=x.cc -DSYMBOL=kName
#   -DHEADER=output/x.h -P embed_template.cmake
file(READ "${INPUT}" content)
set(delimiter "ember_template")
string(FIND "${content}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string terminator )${delimiter}\"")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by embed_template.cmake: edit the template, not this file.\n"
  "#include \"${HEADER}\"\n\n"
  "namespace ember {\n\n"
  "const char ${SYMBOL}[] = R\"${delimiter}(${content})${delimiter}\";\n\n"
  "}  // namespace ember\n")
# Only touch the output when it changed, so an unchanged template recompiles nothing.
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")

#!/bin/bash
# Prints the offsets src/runtimes/cpython/cpython_layout.cc uses, read by gdb from the DWARF of ELF
# (for a stripped binary, gdb finds its debug file by build id, e.g. from python3.11-dbg).
# Output: "<expression> =<value>" lines, recorded under dwarf/ and compared by
# tests/unit/runtimes/cpython/cpython_layout_test.cc.
# usage: dump_offsets.sh ELF > dwarf/3.X.txt
exprs=(
"sizeof(PyASCIIObject)" "sizeof(PyCompactUnicodeObject)"
"&((struct pyruntimestate*)0)->interpreters.head"
"&((struct pyruntimestate*)0)->gilstate.tstate_current"
"&((struct pyruntimestate*)0)->tstate_current"
"&((struct pyruntimestate*)0)->debug_offsets"
"sizeof(((struct pyruntimestate*)0)->debug_offsets)"
"&((struct _is*)0)->tstate_head"
"&((struct _is*)0)->threads.head"
"&((struct _ts*)0)->next"
"&((struct _ts*)0)->frame"
"&((struct _ts*)0)->cframe"
"&((struct _ts*)0)->current_frame"
"&((struct _ts*)0)->thread_id"
"&((struct _ts*)0)->native_thread_id"
"&((struct _PyCFrame*)0)->current_frame"
"&((struct _frame*)0)->f_back"
"&((struct _frame*)0)->f_code"
"&((struct _frame*)0)->f_lasti"
"&((struct _PyInterpreterFrame*)0)->previous"
"&((struct _PyInterpreterFrame*)0)->f_code"
"&((struct _PyInterpreterFrame*)0)->f_executable"
"&((struct _PyInterpreterFrame*)0)->prev_instr"
"&((struct _PyInterpreterFrame*)0)->instr_ptr"
"&((struct _PyInterpreterFrame*)0)->owner"
"&((struct _PyInterpreterFrame*)0)->is_entry"
"&((PyCodeObject*)0)->co_filename"
"&((PyCodeObject*)0)->co_name"
"&((PyCodeObject*)0)->co_qualname"
"&((PyCodeObject*)0)->co_lnotab"
"&((PyCodeObject*)0)->co_linetable"
"&((PyCodeObject*)0)->co_firstlineno"
"&((PyCodeObject*)0)->co_code_adaptive"
"&((PyBytesObject*)0)->ob_sval"
"&((PyVarObject*)0)->ob_size"
"&((PyObject*)0)->ob_type"
"&((PyASCIIObject*)0)->length"
"&((PyASCIIObject*)0)->state"
"FRAME_OWNED_BY_CSTACK"
"FRAME_OWNED_BY_THREAD"
"(int)FRAME_OWNED_BY_GENERATOR"
"Py_Version"
"&_PyRuntime"
"&PyCode_Type"
)
args=(-batch -ex 'set max-value-size unlimited')
for e in "${exprs[@]}"; do args+=(-ex "echo $e = " -ex "output (long)($e)" -ex "echo \n"); done
gdb "${args[@]}" "$1" 2>&1

# A known Python stack for tests/unit/runtimes/cpython/frame_walker_test.cc: the main thread spins in
# leaf_spin <- middle_ü <- Outer.run <- main <- <module>, a second thread in späte_λ_leaf <-
# background <- Thread.run <- ..., a third in gen_spin (a generator) <- key_spin <- [C: sorted]
# <- c_caller <- Thread.run <- ... Prints "ready <main ident> <main native id> <bg ident>
# <bg native id> <c ident> <c native id>" once all spin. Lines tagged "# MARK name" are what the
# test expects.
import sys  # MARK first_statement
import threading

started = threading.Event()
c_started = threading.Event()


def leaf_spin():
    n = 0
    while True:  # MARK leaf_loop
        n += 1  # MARK leaf_body


def middle_ü():
    leaf_spin()  # MARK call_leaf


class Outer:
    def run(self):
        middle_ü()  # MARK call_middle


def späte_λ_leaf():
    started.set()
    n = 0
    while True:  # MARK bg_loop
        n += 1  # MARK bg_body


def background():
    späte_λ_leaf()  # MARK call_bg_leaf


def gen_spin():
    c_started.set()
    n = 0
    while True:  # MARK gen_loop
        n += 1  # MARK gen_body
    yield n


def key_spin(item):
    for value in gen_spin():  # MARK call_gen
        return value


def c_caller():
    return sorted([3, 1, 2], key=key_spin)  # MARK call_sorted


def main():
    thread = threading.Thread(target=background, daemon=True)
    thread.start()
    started.wait()
    c_thread = threading.Thread(target=c_caller, daemon=True)
    c_thread.start()
    c_started.wait()
    print("ready", threading.get_ident(), threading.get_native_id(), thread.ident,
          thread.native_id, c_thread.ident, c_thread.native_id, flush=True)
    Outer().run()  # MARK call_run


main()  # MARK call_main

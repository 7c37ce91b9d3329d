// A large Java application for the agent's memory (bench/hotspot_cost.sh): CLASSES classes of
// METHODS static methods each, generated as bytecode at run time (java.lang.classfile, JDK 24 and
// later) and defined by a class loader of its own, each with a source file and line numbers. Every
// method steps to one of two methods of other classes, picked by a bit of its argument, until a
// chain of DEPTH calls ends: the main thread's samples land all over the classes, in interpreted
// and compiled frames alike, so a profiler names many distinct methods.
//
//   java -cp CLASSES_DIR ember.bench.ManyClasses CLASSES METHODS DEPTH SECONDS
//
// Defines every class first (printing "defined N classes M methods"), then runs chains for SECONDS
// and prints "done".
package ember.bench;

import static java.lang.constant.ConstantDescs.CD_int;

import java.lang.classfile.ClassFile;
import java.lang.classfile.Label;
import java.lang.classfile.attribute.SourceFileAttribute;
import java.lang.constant.ClassDesc;
import java.lang.constant.MethodTypeDesc;
import java.lang.reflect.Method;

public final class ManyClasses {
  static int classes;
  static int methods;
  static final MethodTypeDesc STEP = MethodTypeDesc.of(CD_int, CD_int, CD_int);

  // Where method `method` of class `cls` goes on: a class and a method, spread by a hash.
  static int target(int cls, int method, int which, int modulo) {
    int h = cls * 0x9E3779B1 + method * 0x85EBCA77 + which * 0xC2B2AE3D;
    h ^= h >>> 15;
    h *= 0x27D4EB2F;
    h ^= h >>> 13;
    return Math.floorMod(h, modulo);
  }

  static ClassDesc classDesc(int cls) {
    return ClassDesc.of("ember.bench.gen.C" + cls);
  }

  // int m<j>(int depth, int x): x = x * K + j; the leaf returns it, other steps call on.
  static byte[] generate(int cls) {
    return ClassFile.of()
        .build(
            classDesc(cls),
            cb -> {
              cb.withFlags(ClassFile.ACC_PUBLIC | ClassFile.ACC_FINAL);
              cb.with(SourceFileAttribute.of("C" + cls + ".java"));
              for (int j = 0; j < methods; j++) {
                final int m = j;
                final int line = 10 + 6 * j;
                cb.withMethodBody(
                    "m" + j,
                    STEP,
                    ClassFile.ACC_PUBLIC | ClassFile.ACC_STATIC,
                    code -> {
                      Label odd = code.newLabel();
                      Label leaf = code.newLabel();
                      code.lineNumber(line);
                      code.iload(1).loadConstant(0x5851F42D).imul().loadConstant(m).iadd().istore(1);
                      code.lineNumber(line + 1);
                      code.iload(0).ifle(leaf);
                      code.lineNumber(line + 2);
                      code.iload(1).loadConstant(1 << 9).iand().ifne(odd);
                      code.lineNumber(line + 3);
                      code.iload(0).iconst_1().isub().iload(1);
                      code.invokestatic(
                          classDesc(target(cls, m, 0, classes)),
                          "m" + target(cls, m, 1, methods),
                          STEP);
                      code.iconst_1().iadd().ireturn();
                      code.labelBinding(odd);
                      code.lineNumber(line + 4);
                      code.iload(0).iconst_1().isub().iload(1);
                      code.invokestatic(
                          classDesc(target(cls, m, 2, classes)),
                          "m" + target(cls, m, 3, methods),
                          STEP);
                      code.iconst_2().iadd().ireturn();
                      code.labelBinding(leaf);
                      code.lineNumber(line + 5);
                      code.iload(1).ireturn();
                    });
              }
            });
  }

  static final class Loader extends ClassLoader {
    Loader() {
      super(ManyClasses.class.getClassLoader());
    }

    @Override
    protected Class<?> findClass(String name) throws ClassNotFoundException {
      final String prefix = "ember.bench.gen.C";
      if (!name.startsWith(prefix)) throw new ClassNotFoundException(name);
      byte[] bytes = generate(Integer.parseInt(name.substring(prefix.length())));
      return defineClass(name, bytes, 0, bytes.length);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 4) {
      System.err.println("usage: ManyClasses CLASSES METHODS DEPTH SECONDS");
      System.exit(2);
    }
    classes = Integer.parseInt(args[0]);
    methods = Integer.parseInt(args[1]);
    final int depth = Integer.parseInt(args[2]);
    final long seconds = Long.parseLong(args[3]);
    Loader loader = new Loader();
    Method[] entries = new Method[64];
    for (int i = 0; i < classes; i++) {
      Class<?> cls = Class.forName("ember.bench.gen.C" + i, true, loader);
      if (i < entries.length) entries[i] = cls.getMethod("m0", int.class, int.class);
    }
    System.out.println("defined " + classes + " classes " + (long) classes * methods + " methods");
    System.out.flush();
    long end = System.nanoTime() + seconds * 1_000_000_000L;
    int x = 1;
    long sum = 0;
    while (System.nanoTime() < end) {
      for (int i = 0; i < 1000; i++) {
        x = x * 0x2545F491 + i;
        sum += (Integer) entries[Math.floorMod(x, Math.min(classes, entries.length))].invoke(
            null, depth, x);
      }
    }
    System.out.println("done " + sum);
  }
}

// Started by the HotSpot unit tests: says it is up, then sleeps until killed.
public class Sleeper {
  public static void main(String[] args) throws Exception {
    System.out.println("sleeper ready");
    System.out.flush();
    Thread.sleep(120_000);
  }
}

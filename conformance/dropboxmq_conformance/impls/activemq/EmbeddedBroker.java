// An ActiveMQ Classic broker for the conformance suite's `server` role: persistent (KahaDB
// in DATA_DIR, so durable subscriptions are real), JMX off, one TCP connector on an
// ephemeral port of 127.0.0.1.  Prints the broker URL as its first stdout line (the suite
// hands it to every adapter as {server}), then runs until it is killed.
//
//   EmbeddedBroker DATA_DIR

import java.io.File;

import org.apache.activemq.broker.BrokerService;
import org.apache.activemq.broker.TransportConnector;

public final class EmbeddedBroker {
    public static void main(String[] argv) throws Exception {
        if (argv.length != 1) {
            System.err.println("usage: EmbeddedBroker DATA_DIR");
            System.exit(2);
        }
        BrokerService broker = new BrokerService();
        broker.setBrokerName("conformance");
        broker.setDataDirectoryFile(new File(argv[0]));
        broker.setPersistent(true);
        broker.setUseJmx(false);
        broker.setUseShutdownHook(true);
        broker.setAdvisorySupport(false);
        TransportConnector tcp = broker.addConnector("tcp://127.0.0.1:0");
        broker.start();
        broker.waitUntilStarted();
        System.out.println("tcp://127.0.0.1:" + tcp.getConnectUri().getPort());
        System.out.flush();
        broker.waitUntilStopped();
    }
}

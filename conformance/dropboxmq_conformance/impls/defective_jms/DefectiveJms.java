// JMS providers with one known defect each, to prove the conformance suite's session checks:
// ActiveMQ Classic (which passes them) behind a thin javax.jms wrapper that breaks one rule of
// spec/PROTOCOL.md the way real providers do.
//
//   ack-before-listener   AUTO_ACKNOWLEDGE / DUPS_OK acknowledge a message before onMessage runs
//                         (DropboxMQ 1.2): a listener that throws loses it, and the exception ends
//                         the session's delivery thread, so later messages never reach a listener
//                         (they stay unacknowledged).  Caught by session.listener-throws (J-10).
//   per-message-ack       CLIENT_ACKNOWLEDGE's Message.acknowledge() acknowledges the session's messages
//                         only up to the one it is called on (DropboxMQ 1.2: after m1, m2, m3,
//                         m1.acknowledge() acknowledges m1 only; m3.acknowledge() all three, so
//                         session.client-ack-all passes).  Caught by session.client-ack-earlier (J-2).
//   concurrent-listeners  every consumer of an AUTO_ACKNOWLEDGE session gets a hidden session of its
//                         own, so the listeners of one session run at once.  Caught by
//                         session.listener-serial (J-12).
//
// Everything else is ActiveMQ's.  The generic adapter builds it by reflection:
//   JmsAdapter --factory DefectiveJms --arg BROKER_URL --arg DEFECT

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.List;

import javax.jms.Connection;
import javax.jms.ConnectionFactory;
import javax.jms.JMSException;
import javax.jms.Message;
import javax.jms.MessageConsumer;
import javax.jms.MessageListener;
import javax.jms.Session;

import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.ActiveMQSession;
import org.apache.activemq.command.ActiveMQMessage;
import org.apache.activemq.util.Callback;

public final class DefectiveJms implements ConnectionFactory {
    static final List<String> DEFECTS = List.of("ack-before-listener", "per-message-ack", "concurrent-listeners");

    private final ActiveMQConnectionFactory inner;
    private final String defect;

    public DefectiveJms(String brokerUrl, String defect) {
        if (!DEFECTS.contains(defect)) throw new IllegalArgumentException("unknown defect " + defect + " (known: " + DEFECTS + ")");
        inner = new ActiveMQConnectionFactory(brokerUrl);
        inner.setWatchTopicAdvisories(false);
        this.defect = defect;
    }

    @Override
    public Connection createConnection() throws JMSException {
        return connection(inner.createConnection());
    }

    @Override
    public Connection createConnection(String user, String password) throws JMSException {
        return connection(inner.createConnection(user, password));
    }

    // ------------------------------------------------------------------ delegation

    /** What a wrapper does with one call: a result, or NEXT to let the wrapped object answer. */
    interface Hook {
        Object call(Method m, Object[] args) throws Throwable;
    }

    static final Object NEXT = new Object();

    static Object invoke(Object target, Method m, Object[] args) throws Throwable {
        try {
            return m.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    /** ``target`` seen as ``type`` (an interface), every call but the overridden ones passed on. */
    static <T> T wrap(Class<T> type, Object target, Hook o) {
        InvocationHandler h = (proxy, m, args) -> {
            Object r = o.call(m, args);
            return r != NEXT ? r : invoke(target, m, args);
        };
        return type.cast(Proxy.newProxyInstance(DefectiveJms.class.getClassLoader(), new Class<?>[] {type}, h));
    }

    /** A consumer a session method returned, wrapped as the interface the method declares. */
    static boolean makesConsumer(Method m) {
        return m.getReturnType().isInterface() && MessageConsumer.class.isAssignableFrom(m.getReturnType());
    }

    Connection connection(Connection real) {
        return wrap(Connection.class, real, (m, a) -> {
            if (!m.getName().equals("createSession") || a == null || a.length != 2) return NEXT;
            boolean transacted = (Boolean) a[0];
            int mode = (Integer) a[1];
            if (transacted) return NEXT;
            switch (defect) {
                case "ack-before-listener":
                    if (mode != Session.AUTO_ACKNOWLEDGE && mode != Session.DUPS_OK_ACKNOWLEDGE) return NEXT;
                    // acknowledging is ours now: the real session leaves it to acknowledge()
                    return ackBeforeListener(real.createSession(false, Session.CLIENT_ACKNOWLEDGE), mode);
                case "per-message-ack":
                    if (mode != Session.CLIENT_ACKNOWLEDGE) return NEXT;
                    // ActiveMQ acknowledges one message at a time underneath; ours go up to the given one
                    return ackUpTo(real.createSession(false, ActiveMQSession.INDIVIDUAL_ACKNOWLEDGE), mode);
                default:  // concurrent-listeners
                    if (mode != Session.AUTO_ACKNOWLEDGE) return NEXT;
                    return sessionPerConsumer(real, real.createSession(false, mode));
            }
        });
    }

    // ------------------------------------------------------------------ per-message-ack

    /** One consumed, unacknowledged message and ActiveMQ's own acknowledgement of it alone. */
    record Held(ActiveMQMessage message, Callback ackThisOne) {}

    static Session ackUpTo(Session real, int mode) {
        List<Held> held = new ArrayList<>();  // the session's unacknowledged messages, oldest first
        return wrap(Session.class, real, (m, a) -> {
            switch (m.getName()) {
                case "getAcknowledgeMode":
                    return mode;
                case "recover":
                case "close":
                    synchronized (held) {
                        held.clear();  // redelivered as new message objects, or gone
                    }
                    return NEXT;
                default:
                    break;
            }
            if (!makesConsumer(m)) return NEXT;
            MessageConsumer c = (MessageConsumer) invoke(real, m, a);
            return wrap(m.getReturnType(), c, (cm, ca) -> {
                if (cm.getName().equals("setMessageListener") && ca[0] != null) {
                    MessageListener l = (MessageListener) ca[0];
                    c.setMessageListener(msg -> {
                        try {
                            l.onMessage(ackUpTo(held, msg));
                        } catch (RuntimeException e) {
                            // CLIENT_ACKNOWLEDGE (JMS 1.1 §4.5.2): the next message comes, this one stays
                            // unacknowledged; INDIVIDUAL_ACKNOWLEDGE underneath would redeliver it
                        }
                    });
                    return null;
                }
                if (!cm.getName().startsWith("receive")) return NEXT;
                return ackUpTo(held, (Message) invoke(c, cm, ca));
            });
        });
    }

    /** ``got`` (a message the session consumed), its acknowledge() made to go up to it. */
    static Message ackUpTo(List<Held> held, Message got) {
        if (got instanceof ActiveMQMessage am) {
            synchronized (held) {
                held.add(new Held(am, am.getAcknowledgeCallback()));
            }
            am.setAcknowledgeCallback(() -> {  // the defect: up to this message, not all
                synchronized (held) {
                    if (held.stream().noneMatch(h -> h.message() == am)) return;
                    while (!held.isEmpty()) {
                        Held h = held.remove(0);
                        h.ackThisOne().execute();
                        if (h.message() == am) break;
                    }
                }
            });
        }
        return got;
    }

    // ------------------------------------------------------------------ ack-before-listener

    static Session ackBeforeListener(Session real, int mode) {
        boolean[] dead = {false};  // the session's delivery thread died of a listener's exception
        return wrap(Session.class, real, (m, a) -> {
            if (m.getName().equals("getAcknowledgeMode")) return mode;
            if (!makesConsumer(m)) return NEXT;
            MessageConsumer c = (MessageConsumer) invoke(real, m, a);
            MessageListener[] given = {null};
            return wrap(m.getReturnType(), c, (cm, ca) -> {
                switch (cm.getName()) {
                    case "receive":
                    case "receiveNoWait": {  // receive is right: acknowledged as it returns
                        Message got = (Message) invoke(c, cm, ca);
                        if (got != null) got.acknowledge();
                        return got;
                    }
                    case "getMessageListener":
                        return given[0];
                    case "setMessageListener": {
                        MessageListener l = (MessageListener) ca[0];
                        given[0] = l;
                        c.setMessageListener(l == null ? null : msg -> {
                            if (dead[0]) return;  // no thread left to deliver it: never acknowledged
                            try {
                                msg.acknowledge();  // the defect: before the listener ran
                            } catch (JMSException e) {
                                throw new RuntimeException(e);
                            }
                            try {
                                l.onMessage(msg);
                            } catch (RuntimeException e) {
                                dead[0] = true;  // the message is lost, the thread is gone
                            }
                        });
                        return null;
                    }
                    default:
                        return NEXT;
                }
            });
        });
    }

    // ------------------------------------------------------------------ concurrent-listeners

    static Session sessionPerConsumer(Connection conn, Session real) {
        List<Session> hidden = new ArrayList<>();
        return wrap(Session.class, real, (m, a) -> {
            if (m.getName().equals("close")) {
                for (Session h : hidden) h.close();
                return NEXT;
            }
            if (!m.getName().equals("createConsumer")) return NEXT;
            Session h = conn.createSession(false, Session.AUTO_ACKNOWLEDGE);  // the defect: its own thread
            hidden.add(h);
            return invoke(h, m, a);
        });
    }
}

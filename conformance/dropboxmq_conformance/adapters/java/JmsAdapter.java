// The conformance suite's JSON-lines session protocol (conformance/README.md) on any JMS 1.1
// provider.  Provider-agnostic: the ConnectionFactory is built by reflection from its class
// name, constructor arguments and bean properties; no JNDI.  One process = one connection.
//
//   java -cp <this>:<provider classpath> JmsAdapter --factory CLASS [--arg VALUE]...
//        [--property NAME=VALUE]... [--client-id ID]
//
// Compiled at run time against the JMS 1.1 API only (see run-java.sh).  Every failure is
// an answer ({"ok":false,"error":KIND,...}), never a crash.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import javax.jms.Connection;
import javax.jms.ConnectionFactory;
import javax.jms.DeliveryMode;
import javax.jms.Destination;
import javax.jms.IllegalStateException;
import javax.jms.InvalidClientIDException;
import javax.jms.InvalidDestinationException;
import javax.jms.InvalidSelectorException;
import javax.jms.JMSException;
import javax.jms.Message;
import javax.jms.MessageConsumer;
import javax.jms.MessageListener;
import javax.jms.MessageProducer;
import javax.jms.Session;
import javax.jms.TextMessage;
import javax.jms.Topic;

public final class JmsAdapter {

    /** A request the adapter cannot serve with JMS 1.1 (e.g. shared subscriptions, JMS 2.0). */
    static final class Unsupported extends RuntimeException {
        Unsupported(String m) { super(m); }
    }

    static final class BadRequest extends RuntimeException {
        BadRequest(String m) { super(m); }
    }

    private final Connection conn;
    private final Map<String, Session> sessions = new HashMap<>();
    private final Map<String, MessageProducer> producers = new HashMap<>();
    private final Map<String, MessageConsumer> consumers = new HashMap<>();
    private final Map<String, MessageConsumer> queueConsumers = new HashMap<>();
    /** The last message each CLIENT_ACKNOWLEDGE session received: acknowledge() goes through it. */
    private final Map<String, Message> lastReceived = Collections.synchronizedMap(new HashMap<>());
    /** Every message handed out, by JMSMessageID: acknowledge with "message" goes through that one. */
    private final Map<String, Message> received = Collections.synchronizedMap(new HashMap<>());
    private int sessionCount, consumerCount;

    JmsAdapter(ConnectionFactory factory, String clientId) throws JMSException {
        conn = factory.createConnection();
        if (clientId != null && !clientId.isEmpty()) conn.setClientID(clientId);
        conn.start();
    }

    // ------------------------------------------------------------------ factory by reflection

    static ConnectionFactory factory(String cls, List<String> args, Map<String, String> props) throws Exception {
        Class<?> c = Class.forName(cls);
        Object f = null;
        for (Constructor<?> k : c.getConstructors()) {
            if (k.getParameterCount() != args.size()) continue;
            Object[] values = new Object[args.size()];
            boolean fits = true;
            for (int i = 0; i < values.length && fits; i++) {
                values[i] = convert(args.get(i), k.getParameterTypes()[i]);
                fits = values[i] != null;
            }
            if (fits) { f = k.newInstance(values); break; }
        }
        if (f == null) throw new BadRequest(cls + " has no public constructor taking " + args.size() + " argument(s) " + args);
        for (Map.Entry<String, String> p : props.entrySet()) {
            String setter = "set" + Character.toUpperCase(p.getKey().charAt(0)) + p.getKey().substring(1);
            Method found = null;
            for (Method m : c.getMethods()) {
                if (m.getName().equals(setter) && m.getParameterCount() == 1
                        && convert(p.getValue(), m.getParameterTypes()[0]) != null) { found = m; break; }
            }
            if (found == null) throw new BadRequest(cls + " has no bean property " + p.getKey());
            found.invoke(f, convert(p.getValue(), found.getParameterTypes()[0]));
        }
        if (!(f instanceof ConnectionFactory)) throw new BadRequest(cls + " is not a javax.jms.ConnectionFactory");
        return (ConnectionFactory) f;
    }

    static Object convert(String v, Class<?> t) {
        try {
            if (t == String.class || t == Object.class) return v;
            if (t == int.class || t == Integer.class) return Integer.valueOf(v);
            if (t == long.class || t == Long.class) return Long.valueOf(v);
            if (t == boolean.class || t == Boolean.class) {
                if (v.equals("true") || v.equals("false")) return Boolean.valueOf(v);
                return null;
            }
            if (t == double.class || t == Double.class) return Double.valueOf(v);
        } catch (NumberFormatException e) {
            return null;
        }
        return null;
    }

    // ------------------------------------------------------------------ requests

    Map<String, Object> handle(Map<String, Object> req) {
        String op = String.valueOf(req.get("op"));
        Map<String, Object> out = new LinkedHashMap<>();
        try {
            switch (op) {
                case "session": out.put("session", session(str(req, "ack_mode", "auto"))); break;
                case "send": out.put("id", send(req)); break;
                case "receive": out.put("message", receive(req)); break;
                case "subscribe": out.put("consumer", subscribe(req)); break;
                case "close_consumer": consumer(req).close(); consumers.remove(str(req, "consumer", "")); break;
                case "unsubscribe": session(req).unsubscribe(str(req, "name", "")); break;
                case "acknowledge": acknowledge(req); break;
                case "listen": out.putAll(listen(req)); break;
                case "recover": session(req).recover(); break;
                case "commit": session(req).commit(); break;
                case "rollback": session(req).rollback(); break;
                case "close_session": session(req).close(); sessions.remove(str(req, "session", "s1")); break;
                case "close": conn.close(); break;
                default:
                    return error("unknown_op", "unknown op " + op);
            }
        } catch (InvalidSelectorException e) {
            return error("invalid_selector", e);
        } catch (InvalidClientIDException e) {
            return error("invalid_client_id", e);
        } catch (InvalidDestinationException e) {
            return error("invalid_destination", e);
        } catch (IllegalStateException e) {
            return error("illegal_state", e);
        } catch (JMSException e) {
            return error("jms", e);
        } catch (Unsupported e) {
            return error("unsupported", e);
        } catch (BadRequest e) {
            return error("bad_request", e.getMessage());
        } catch (RuntimeException e) {
            return error("other", e);
        }
        Map<String, Object> ok = new LinkedHashMap<>();
        ok.put("ok", true);
        ok.putAll(out);
        return ok;
    }

    static Map<String, Object> error(String kind, Object what) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("ok", false);
        m.put("error", kind);
        m.put("message", what instanceof Throwable t ? t.getClass().getName() + ": " + t.getMessage() : String.valueOf(what));
        return m;
    }

    String session(String ackMode) throws JMSException {
        Session s;
        switch (ackMode) {
            case "auto": s = conn.createSession(false, Session.AUTO_ACKNOWLEDGE); break;
            case "client": s = conn.createSession(false, Session.CLIENT_ACKNOWLEDGE); break;
            case "dups_ok": s = conn.createSession(false, Session.DUPS_OK_ACKNOWLEDGE); break;
            case "transacted": s = conn.createSession(true, Session.SESSION_TRANSACTED); break;
            default: throw new BadRequest("ack_mode must be auto, client, dups_ok or transacted, not " + ackMode);
        }
        String id = "s" + (++sessionCount);
        sessions.put(id, s);
        return id;
    }

    Session session(Map<String, Object> req) {
        Session s = sessions.get(str(req, "session", "s1"));
        if (s == null) throw new BadRequest("no session " + req.get("session"));
        return s;
    }

    MessageConsumer consumer(Map<String, Object> req) {
        MessageConsumer c = consumers.get(str(req, "consumer", ""));
        if (c == null) throw new BadRequest("no consumer " + req.get("consumer"));
        return c;
    }

    Destination destination(Session s, Map<String, Object> req) throws JMSException {
        if (req.get("queue") != null) return s.createQueue(str(req, "queue", ""));
        if (req.get("topic") != null) return s.createTopic(str(req, "topic", ""));
        throw new InvalidDestinationException("give 'queue' or 'topic'");
    }

    String send(Map<String, Object> req) throws JMSException {
        String sid = str(req, "session", "s1");
        Session s = session(req);
        MessageProducer p = producers.get(sid);
        if (p == null) {
            p = s.createProducer(null);  // one unidentified producer per session
            producers.put(sid, p);
        }
        TextMessage msg = s.createTextMessage(str(req, "body", ""));
        Object props = req.get("properties");
        if (props instanceof Map<?, ?> pm) {
            for (Map.Entry<?, ?> e : pm.entrySet()) {
                String k = String.valueOf(e.getKey());
                Object v = e.getValue();
                if (v instanceof Boolean b) msg.setBooleanProperty(k, b);
                else if (v instanceof Long l) {
                    if (l >= Integer.MIN_VALUE && l <= Integer.MAX_VALUE) msg.setIntProperty(k, (int) (long) l);
                    else msg.setLongProperty(k, l);
                } else if (v instanceof Double d) msg.setDoubleProperty(k, d);
                else msg.setStringProperty(k, String.valueOf(v));
            }
        }
        int priority = (int) num(req, "priority", 4);
        long ttl = num(req, "ttl_ms", 0);
        p.send(destination(s, req), msg, DeliveryMode.PERSISTENT, priority, ttl);
        return msg.getJMSMessageID();
    }

    Map<String, Object> receive(Map<String, Object> req) throws JMSException {
        MessageConsumer c;
        String sid;
        if (req.get("consumer") != null) {
            c = consumer(req);
            sid = sessionOf.get(str(req, "consumer", ""));
        } else {
            sid = str(req, "session", "s1");
            Session s = session(req);
            String selector = req.get("selector") == null ? null : str(req, "selector", null);
            String key = sid + "\u0000" + req.get("queue") + "\u0000" + selector;
            c = queueConsumers.get(key);
            if (c == null) {
                c = s.createConsumer(destination(s, req), selector);
                queueConsumers.put(key, c);
            }
        }
        long timeout = num(req, "timeout_ms", 200);
        Message m = timeout <= 0 ? c.receiveNoWait() : c.receive(timeout);
        if (m == null) return null;
        lastReceived.put(sid, m);
        received.put(m.getJMSMessageID(), m);
        return message(m);
    }

    /** A MessageListener on a new consumer of the queue (or one consumer per queue of "queues",
     *  all in this session): records each delivery, throws on the first one when asked, holds
     *  each onMessage for "hold_ms", until "count" deliveries or "timeout_ms"; then the consumers
     *  close.  "max_concurrent" is the most onMessage calls of the session that ran at once. */
    Map<String, Object> listen(Map<String, Object> req) throws JMSException {
        Session s = session(req);
        String sid = str(req, "session", "s1");
        List<Destination> dests = new ArrayList<>();
        if (req.get("queues") instanceof List<?> qs) {
            for (Object q : qs) dests.add(s.createQueue(String.valueOf(q)));
        } else {
            dests.add(destination(s, req));
        }
        List<Object> got = Collections.synchronizedList(new ArrayList<>());
        int count = (int) num(req, "count", 1);
        long hold = num(req, "hold_ms", 0);
        boolean throwFirst = bool(req, "throw_on_first");
        String finish = str(req, "finish", "");
        CountDownLatch done = new CountDownLatch(count);
        AtomicInteger inside = new AtomicInteger();
        AtomicInteger most = new AtomicInteger();
        MessageListener listener = m -> {
            most.accumulateAndGet(inside.incrementAndGet(), Math::max);
            try {
                int n;
                synchronized (got) {
                    got.add(message(m));
                    n = got.size();
                }
                lastReceived.put(sid, m);
                received.put(m.getJMSMessageID(), m);
                if (hold > 0) Thread.sleep(hold);
                if (throwFirst && n == 1) throw new RuntimeException("the conformance listener fails its first message");
                // the session belongs to the listener's thread now: acknowledge or commit from here
                if (n == count && finish.equals("acknowledge")) m.acknowledge();
                if (n == count && finish.equals("commit")) s.commit();
            } catch (JMSException e) {
                throw new RuntimeException(e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                inside.decrementAndGet();
                done.countDown();
            }
        };
        List<MessageConsumer> cs = new ArrayList<>();
        for (Destination d : dests) {
            MessageConsumer c = s.createConsumer(d);
            cs.add(c);
            c.setMessageListener(listener);
        }
        try {
            done.await(num(req, "timeout_ms", 5000), TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        for (MessageConsumer c : cs) c.close();
        Map<String, Object> out = new LinkedHashMap<>();
        synchronized (got) {
            out.put("deliveries", new ArrayList<>(got));
        }
        out.put("max_concurrent", most.get());
        return out;
    }

    private final Map<String, String> sessionOf = new HashMap<>();

    String subscribe(Map<String, Object> req) throws JMSException {
        Session s = session(req);
        if (bool(req, "shared")) throw new Unsupported("shared subscriptions are JMS 2.0; this adapter speaks JMS 1.1");
        Topic topic = s.createTopic(str(req, "topic", ""));
        String selector = req.get("selector") == null ? null : str(req, "selector", null);
        boolean noLocal = bool(req, "no_local");
        MessageConsumer c = bool(req, "durable")
                ? s.createDurableSubscriber(topic, str(req, "name", ""), selector, noLocal)
                : s.createConsumer(topic, selector, noLocal);
        String id = "c" + (++consumerCount);
        consumers.put(id, c);
        sessionOf.put(id, str(req, "session", "s1"));
        return id;
    }

    void acknowledge(Map<String, Object> req) throws JMSException {
        session(req);  // an unknown session is an error even with nothing to acknowledge
        if (req.get("message") != null) {  // acknowledge() on that message: all the session consumed
            Message given = received.get(str(req, "message", ""));
            if (given == null) throw new BadRequest("no message " + req.get("message") + " was received");
            given.acknowledge();
            lastReceived.remove(str(req, "session", "s1"));
            return;
        }
        Message m = lastReceived.remove(str(req, "session", "s1"));
        if (m != null) m.acknowledge();  // JMS 1.1: acknowledges every message the session consumed
    }

    static Map<String, Object> message(Message m) throws JMSException {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("id", m.getJMSMessageID());
        out.put("body", m instanceof TextMessage t ? t.getText() : null);
        out.put("redelivered", m.getJMSRedelivered());
        int count = m.propertyExists("JMSXDeliveryCount") ? m.getIntProperty("JMSXDeliveryCount")
                : (m.getJMSRedelivered() ? 2 : 1);
        out.put("delivery_count", count);
        out.put("priority", m.getJMSPriority());
        Map<String, Object> props = new LinkedHashMap<>();
        for (Enumeration<?> e = m.getPropertyNames(); e.hasMoreElements(); ) {
            String k = String.valueOf(e.nextElement());
            if (!k.startsWith("JMSX")) props.put(k, m.getObjectProperty(k));
        }
        out.put("properties", props);
        return out;
    }

    static String str(Map<String, Object> req, String key, String dflt) {
        Object v = req.get(key);
        return v == null ? dflt : String.valueOf(v);
    }

    static long num(Map<String, Object> req, String key, long dflt) {
        Object v = req.get(key);
        if (v instanceof Long l) return l;
        if (v instanceof Double d) return (long) (double) d;
        return dflt;
    }

    static boolean bool(Map<String, Object> req, String key) {
        return Boolean.TRUE.equals(req.get(key));
    }

    // ------------------------------------------------------------------ main loop

    public static void main(String[] argv) throws Exception {
        String cls = null, clientId = "";
        List<String> args = new ArrayList<>();
        Map<String, String> props = new LinkedHashMap<>();
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            if (i + 1 >= argv.length) usage("missing value after " + a);
            String v = argv[++i];
            switch (a) {
                case "--factory": cls = v; break;
                case "--arg": args.add(v); break;
                case "--client-id": clientId = v; break;
                case "--property": {
                    int eq = v.indexOf('=');
                    if (eq <= 0) usage("--property wants NAME=VALUE, not " + v);
                    props.put(v.substring(0, eq), v.substring(eq + 1));
                    break;
                }
                default: usage("unknown option " + a);
            }
        }
        if (cls == null) usage("--factory CLASS is required");
        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);  // providers' chatter must never reach the protocol stream
        JmsAdapter adapter = null;
        String startError = null;
        try {
            adapter = new JmsAdapter(factory(cls, args, props), clientId);
        } catch (InvocationTargetException e) {
            startError = e.getCause().toString();
        } catch (Exception e) {
            startError = e.toString();
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            Map<String, Object> resp;
            Map<String, Object> req = null;
            String parseError = "not a JSON object";
            try {
                req = Json.request(line);
            } catch (RuntimeException e) {  // truncated or malformed JSON: an answer, never a crash
                parseError = "not JSON (" + e.getMessage() + ")";
            }
            if (req == null) resp = error("bad_request", parseError);
            else if (adapter == null) resp = error("jms", "the connection could not be made: " + startError);
            else resp = adapter.handle(req);
            out.println(Json.write(resp));
            out.flush();
            if (req != null && "close".equals(req.get("op"))) break;
        }
        if (adapter != null) {
            try { adapter.conn.close(); } catch (JMSException ignored) { /* already closed */ }
        }
        System.exit(0);  // providers may leave non-daemon threads behind
    }

    static void usage(String why) {
        System.err.println("JmsAdapter: " + why);
        System.err.println("usage: JmsAdapter --factory CLASS [--arg VALUE]... [--property NAME=VALUE]... [--client-id ID]");
        System.exit(2);
    }

    // ------------------------------------------------------------------ minimal JSON

    /** Just enough JSON for the protocol: objects, arrays, strings, numbers (Long/Double), true/false/null. */
    static final class Json {
        private final String s;
        private int i;

        Json(String s) { this.s = s; }

        /** One request line: a JSON object, or null (any other JSON value). */
        @SuppressWarnings("unchecked")
        static Map<String, Object> request(String line) {
            Object v = new Json(line).value();
            return v instanceof Map<?, ?> ? (Map<String, Object>) v : null;
        }

        Object value() {
            Object v = parse();
            ws();
            if (i != s.length()) throw new BadRequest("trailing characters in JSON at " + i);
            return v;
        }

        private void ws() { while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++; }

        private Object parse() {
            ws();
            if (i >= s.length()) throw new BadRequest("unexpected end of JSON");
            char c = s.charAt(i);
            if (c == '{') {
                Map<String, Object> m = new LinkedHashMap<>();
                i++; ws();
                if (s.charAt(i) == '}') { i++; return m; }
                while (true) {
                    ws();
                    String k = string();
                    ws(); expect(':');
                    m.put(k, parse());
                    ws();
                    if (s.charAt(i) == ',') { i++; continue; }
                    expect('}');
                    return m;
                }
            }
            if (c == '[') {
                List<Object> l = new ArrayList<>();
                i++; ws();
                if (s.charAt(i) == ']') { i++; return l; }
                while (true) {
                    l.add(parse());
                    ws();
                    if (s.charAt(i) == ',') { i++; continue; }
                    expect(']');
                    return l;
                }
            }
            if (c == '"') return string();
            if (s.startsWith("true", i)) { i += 4; return Boolean.TRUE; }
            if (s.startsWith("false", i)) { i += 5; return Boolean.FALSE; }
            if (s.startsWith("null", i)) { i += 4; return null; }
            int start = i;
            while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
            String n = s.substring(start, i);
            if (n.isEmpty()) throw new BadRequest("bad JSON at " + start);
            try {
                return n.matches("-?\\d+") ? (Object) Long.valueOf(n) : (Object) Double.valueOf(n);
            } catch (NumberFormatException e) {
                throw new BadRequest("bad JSON number " + n);
            }
        }

        private void expect(char c) {
            if (i >= s.length() || s.charAt(i) != c) throw new BadRequest("expected '" + c + "' in JSON at " + i);
            i++;
        }

        private String string() {
            expect('"');
            StringBuilder b = new StringBuilder();
            while (true) {
                if (i >= s.length()) throw new BadRequest("unterminated JSON string");
                char c = s.charAt(i++);
                if (c == '"') return b.toString();
                if (c != '\\') { b.append(c); continue; }
                char e = s.charAt(i++);
                switch (e) {
                    case 'n': b.append('\n'); break;
                    case 't': b.append('\t'); break;
                    case 'r': b.append('\r'); break;
                    case 'b': b.append('\b'); break;
                    case 'f': b.append('\f'); break;
                    case 'u': b.append((char) Integer.parseInt(s.substring(i, i + 4), 16)); i += 4; break;
                    default: b.append(e);
                }
            }
        }

        static String write(Object v) {
            StringBuilder b = new StringBuilder();
            write(b, v);
            return b.toString();
        }

        private static void write(StringBuilder b, Object v) {
            if (v == null) b.append("null");
            else if (v instanceof Boolean || v instanceof Integer || v instanceof Long) b.append(v);
            else if (v instanceof Number n) {
                double d = n.doubleValue();
                b.append(Double.isFinite(d) ? String.valueOf(d) : "null");
            } else if (v instanceof Map<?, ?> m) {
                b.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : m.entrySet()) {
                    if (!first) b.append(',');
                    first = false;
                    quote(b, String.valueOf(e.getKey()));
                    b.append(':');
                    write(b, e.getValue());
                }
                b.append('}');
            } else if (v instanceof List<?> l) {
                b.append('[');
                for (int k = 0; k < l.size(); k++) {
                    if (k > 0) b.append(',');
                    write(b, l.get(k));
                }
                b.append(']');
            } else quote(b, String.valueOf(v));
        }

        private static void quote(StringBuilder b, String s) {
            b.append('"');
            for (int k = 0; k < s.length(); k++) {
                char c = s.charAt(k);
                switch (c) {
                    case '"': b.append("\\\""); break;
                    case '\\': b.append("\\\\"); break;
                    case '\n': b.append("\\n"); break;
                    case '\r': b.append("\\r"); break;
                    case '\t': b.append("\\t"); break;
                    default:
                        if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                        else b.append(c);
                }
            }
            b.append('"');
        }
    }

}

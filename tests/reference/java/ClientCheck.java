// Apache Kafka's Java client (kafka-clients) against a broker: run in source-file mode,
//   java -cp 'KAFKA_LIBS/*' ClientCheck.java COMMAND BOOTSTRAP ARGS...
// Each command prints one line per fact the Python test checks, and exits non-zero on any error.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ClientCheck {
    public static void main(String[] args) throws Exception {
        String command = args[0], bootstrap = args[1];
        switch (command) {
            case "produce" -> produce(bootstrap, args[2], args[3], Integer.parseInt(args[4]),
                    args.length > 5 ? Integer.valueOf(args[5]) : null);
            case "consume-group" -> consumeGroup(bootstrap, args[2], args[3], Integer.parseInt(args[4]));
            case "admin" -> admin(bootstrap, args[2]);
            default -> throw new IllegalArgumentException("unknown command " + command);
        }
    }

    // An idempotent producer (acks=all, 5 in flight) with one codec; prints each record's offset.
    // Without a partition, keys spread the records (murmur2).
    static void produce(String bootstrap, String topic, String codec, int n, Integer partition) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("compression.type", codec);
        p.put("linger.ms", "5");
        p.put("batch.size", "4096");
        try (Producer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, partition, "k" + i, codec + "-v" + i)));
            }
            for (Future<RecordMetadata> f : sent) {
                RecordMetadata m = f.get(60, TimeUnit.SECONDS);
                System.out.println("acked " + m.partition() + " " + m.offset());
            }
        }
    }

    // Two consumers in one group with the cooperative-sticky assignor, each on its own thread.
    // The second joins once the first has records in hand (a cooperative rebalance while it
    // consumes); both poll, committing synchronously after each poll, until the group has n
    // records and each member owns partitions. Prints who owned what and any duplicate.
    static void consumeGroup(String bootstrap, String topic, String group, int n) throws Exception {
        ConcurrentHashMap<String, String> seen = new ConcurrentHashMap<>();
        ConcurrentHashMap<String, Integer> owning = new ConcurrentHashMap<>();
        CountDownLatch firstHasRecords = new CountDownLatch(1);
        ExecutorService pool = Executors.newFixedThreadPool(2);
        List<Future<Set<TopicPartition>>> owners = new ArrayList<>();
        for (int c = 0; c < 2; c++) {
            final String name = "member" + c;
            final boolean second = c == 1;
            owners.add(pool.submit(() -> {
                if (second && !firstHasRecords.await(120, TimeUnit.SECONDS)) throw new IllegalStateException("member0 got no records");
                Properties p = new Properties();
                p.put("bootstrap.servers", bootstrap);
                p.put("group.id", group);
                p.put("client.id", name);
                p.put("auto.offset.reset", "earliest");
                p.put("enable.auto.commit", "false");
                p.put("partition.assignment.strategy", CooperativeStickyAssignor.class.getName());
                p.put("max.poll.records", "20");
                Set<TopicPartition> everOwned = new TreeSet<>(Comparator.comparing(TopicPartition::toString));
                try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
                    // Commit what was read before a partition moves (the cooperative protocol revokes
                    // during poll); a commit that meets a rebalance is retried after the next poll.
                    consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                            if (!partitions.isEmpty()) consumer.commitSync();
                        }
                        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {}
                    });
                    long deadline = System.currentTimeMillis() + 120_000;
                    while (System.currentTimeMillis() < deadline) {
                        ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                        everOwned.addAll(consumer.assignment());
                        owning.put(name, consumer.assignment().size());
                        for (ConsumerRecord<String, String> r : records) {
                            String previous = seen.put(r.partition() + ":" + r.offset(), name);
                            if (previous != null) System.out.println("duplicate " + r.partition() + ":" + r.offset());
                        }
                        try {
                            consumer.commitSync();
                        } catch (org.apache.kafka.common.errors.RebalanceInProgressException e) {
                            continue;  // the next poll completes the rebalance (and the revocation commits)
                        }
                        if (!records.isEmpty()) firstHasRecords.countDown();
                        boolean bothOwn = owning.getOrDefault("member0", 0) > 0 && owning.getOrDefault("member1", 0) > 0;
                        if (seen.size() >= n && bothOwn) break;
                    }
                }
                return everOwned;
            }));
        }
        for (int c = 0; c < 2; c++) {
            System.out.println("owned member" + c + " " + owners.get(c).get(180, TimeUnit.SECONDS).size());
        }
        pool.shutdown();
        System.out.println("consumed " + seen.size());
    }

    // The AdminClient's everyday calls.
    static void admin(String bootstrap, String topic) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(p)) {
            System.out.println("cluster brokers " + admin.describeCluster().nodes().get().size());
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
            System.out.println("listed " + admin.listTopics().names().get().contains(topic));
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            System.out.println("partitions " + d.partitions().size());
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get();
            System.out.println("partitions after " + admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size());
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET)))).all().get();
            Config config = admin.describeConfigs(List.of(res)).all().get().get(res);
            System.out.println("retention.ms " + config.get("retention.ms").value() + " " + config.get("retention.ms").source());
            try (Producer<String, String> producer = new KafkaProducer<>(Map.of("bootstrap.servers", bootstrap), new StringSerializer(), new StringSerializer())) {
                for (int i = 0; i < 10; i++) producer.send(new ProducerRecord<>(topic, 1, null, "v" + i)).get();
            }
            TopicPartition tp = new TopicPartition(topic, 1);
            System.out.println("latest " + admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get().get(tp).offset());
            admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4))).all().get();
            System.out.println("earliest " + admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all().get().get(tp).offset());
            admin.deleteTopics(List.of(topic)).all().get();
            System.out.println("listed after delete " + admin.listTopics().names().get().contains(topic));
        }
    }
}

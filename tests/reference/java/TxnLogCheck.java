// Kafka's own __transaction_state classes on pulllog's bytes: each argument is a hex key or
// value (k:HEX, v:HEX); each is decoded with TransactionLogKey / TransactionLogValue and
// re-encoded by Kafka at the same version, and one line per argument says what Kafka read
// and whether its bytes are pulllog's.
import java.nio.ByteBuffer;
import java.util.HexFormat;

import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.coordinator.transaction.generated.TransactionLogKey;
import org.apache.kafka.coordinator.transaction.generated.TransactionLogValue;

public class TxnLogCheck {
    public static void main(String[] args) {
        HexFormat hex = HexFormat.of();
        for (String arg : args) {
            byte[] bytes = hex.parseHex(arg.substring(2));
            ByteBuffer buf = ByteBuffer.wrap(bytes);
            short version = buf.getShort();
            if (arg.startsWith("k:")) {
                TransactionLogKey key = new TransactionLogKey(new ByteBufferAccessor(buf), version);
                byte[] again = MessageUtil.toVersionPrefixedBytes(version, key);
                System.out.println("key " + key.transactionalId() + " same=" + java.util.Arrays.equals(bytes, again));
            } else {
                TransactionLogValue v = new TransactionLogValue(new ByteBufferAccessor(buf), version);
                byte[] again = MessageUtil.toVersionPrefixedBytes(version, v);
                StringBuilder parts = new StringBuilder();
                if (v.transactionPartitions() != null) {
                    for (TransactionLogValue.PartitionsSchema p : v.transactionPartitions()) {
                        parts.append(p.topic()).append(p.partitionIds());
                    }
                } else {
                    parts.append("null");
                }
                System.out.println("value v" + version + " pid=" + v.producerId() + " epoch=" + v.producerEpoch()
                    + " timeout=" + v.transactionTimeoutMs() + " state=" + v.transactionStatus()
                    + " partitions=" + parts + " updated=" + v.transactionLastUpdateTimestampMs()
                    + " started=" + v.transactionStartTimestampMs() + " previous=" + v.previousProducerId()
                    + " next=" + v.nextProducerId() + " same=" + java.util.Arrays.equals(bytes, again)
                    + " remaining=" + buf.remaining());
            }
        }
    }
}

// A Fast DDS camera with default settings (what a driver gets through rmw_fastrtps without
// tuning), built against Debian's libfastrtps-dev 2.9, for examples/dds_large_messages.rs
// `camera`: publishes sensor_msgs/Image frames of the given size at a fixed rate, stamped with
// the wall clock at sending, so a reader can tell the latency.
//
//   fastdds_image_writer TOPIC WIDTH HEIGHT ENCODING RATE SECONDS best_effort|reliable
//
// Best effort keep last 5 (SensorDataQoS) or reliable keep last 10 (rclcpp's default), volatile.
// Waits up to 10 s for a reader, then sends for SECONDS and prints one JSON line:
//   {"sent":N,"seconds":S}
// Build: tools/peers/build-fastdds-peer.sh image_writer. Run it only inside a private network
// namespace.

#include <fastdds/dds/domain/DomainParticipant.hpp>
#include <fastdds/dds/domain/DomainParticipantFactory.hpp>
#include <fastdds/dds/publisher/DataWriter.hpp>
#include <fastdds/dds/publisher/Publisher.hpp>
#include <fastdds/dds/publisher/qos/DataWriterQos.hpp>
#include <fastdds/dds/topic/Topic.hpp>
#include <fastdds/dds/topic/TypeSupport.hpp>
#include "fastdds_raw.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace eprosima::fastdds::dds;

static double now_s() {
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
}

// Little-endian CDR of sensor_msgs/Image, after the 4-byte encapsulation header; alignment is
// counted from the end of that header.
class Cdr {
public:
    std::vector<uint8_t> bytes{0x00, 0x01, 0x00, 0x00};
    void align(size_t n) {
        while ((bytes.size() - 4) % n) bytes.push_back(0);
    }
    void u32(uint32_t v) {
        align(4);
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        bytes.insert(bytes.end(), p, p + 4);
    }
    void text(const std::string& s) {
        u32(static_cast<uint32_t>(s.size() + 1));
        bytes.insert(bytes.end(), s.begin(), s.end());
        bytes.push_back(0);
    }
};

static std::vector<uint8_t> image(double stamp, uint32_t width, uint32_t height, const std::string& encoding) {
    const uint32_t bpp = encoding == "mono8" ? 1 : 3;
    Cdr c;
    c.u32(static_cast<uint32_t>(static_cast<int32_t>(stamp)));
    c.u32(static_cast<uint32_t>((stamp - static_cast<int32_t>(stamp)) * 1e9));
    c.text("cam");
    c.u32(height);
    c.u32(width);
    c.text(encoding);
    c.bytes.push_back(0);  // is_bigendian
    c.u32(width * bpp);
    c.u32(width * height * bpp);
    c.bytes.resize(c.bytes.size() + static_cast<size_t>(width) * height * bpp, 128);
    return c.bytes;
}

int main(int argc, char** argv) {
    if (argc != 8) {
        std::fprintf(stderr, "usage: %s TOPIC WIDTH HEIGHT ENCODING RATE SECONDS best_effort|reliable\n", argv[0]);
        return 2;
    }
    const std::string topic_name = argv[1], encoding = argv[4], reliability = argv[7];
    const uint32_t width = std::strtoul(argv[2], nullptr, 10), height = std::strtoul(argv[3], nullptr, 10);
    const double rate = std::atof(argv[5]), seconds = std::atof(argv[6]);

    auto* factory = DomainParticipantFactory::get_instance();
    DomainParticipant* participant = factory->create_participant(0, PARTICIPANT_QOS_DEFAULT);
    if (!participant) return 1;
    const std::string type_name = "sensor_msgs::msg::dds_::Image_";
    TypeSupport type(new RawType(type_name));
    type.register_type(participant);
    Topic* topic = participant->create_topic(topic_name, type_name, TOPIC_QOS_DEFAULT);
    Publisher* publisher = participant->create_publisher(PUBLISHER_QOS_DEFAULT);
    DataWriterQos qos = DATAWRITER_QOS_DEFAULT;
    if (reliability == "reliable") {
        reliable_volatile_last10(qos);
    } else {
        qos.reliability().kind = BEST_EFFORT_RELIABILITY_QOS;
        qos.history().kind = KEEP_LAST_HISTORY_QOS;
        qos.history().depth = 5;
        qos.durability().kind = VOLATILE_DURABILITY_QOS;
    }
    DataWriter* writer = publisher->create_datawriter(topic, qos);
    if (!topic || !publisher || !writer) return 1;

    for (int i = 0; i < 1000; ++i) {
        PublicationMatchedStatus status;
        writer->get_publication_matched_status(status);
        if (status.current_count > 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));

    Raw sample;
    size_t sent = 0;
    const double start = now_s();
    while (now_s() - start < seconds) {
        const double target = start + sent / rate;
        const double wait = target - now_s();
        if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
        sample.bytes = image(now_s(), width, height, encoding);
        writer->write(&sample);
        ++sent;
    }
    std::printf("{\"sent\":%zu,\"seconds\":%.3f}\n", sent, now_s() - start);
    std::fflush(stdout);
    // Time for a reliable writer's repairs before the participant goes.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    participant->delete_contained_entities();
    factory->delete_participant(participant);
    return 0;
}

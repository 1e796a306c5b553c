// Any keyless DDS type as its raw CDR bytes (encapsulation header included), for the Fast DDS
// peers: a reader or writer needs only the type's name to match.
#pragma once

#include <fastdds/dds/core/policy/QosPolicies.hpp>
#include <fastdds/dds/topic/TopicDataType.hpp>
#include <fastrtps/rtps/common/SerializedPayload.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

// A sample as its serialized bytes.
struct Raw {
    std::vector<uint8_t> bytes;
};

class RawType : public eprosima::fastdds::dds::TopicDataType {
public:
    explicit RawType(const std::string& name) {
        setName(name.c_str());
        // The initial payload size; the default (preallocated with realloc) memory policy grows it.
        m_typeSize = 4096;
        m_isGetKeyDefined = false;
    }
    bool serialize(void* data, eprosima::fastrtps::rtps::SerializedPayload_t* payload) override {
        auto* raw = static_cast<Raw*>(data);
        if (payload->max_size < raw->bytes.size()) return false;
        std::memcpy(payload->data, raw->bytes.data(), raw->bytes.size());
        payload->length = static_cast<uint32_t>(raw->bytes.size());
        return true;
    }
    bool deserialize(eprosima::fastrtps::rtps::SerializedPayload_t* payload, void* data) override {
        static_cast<Raw*>(data)->bytes.assign(payload->data, payload->data + payload->length);
        return true;
    }
    std::function<uint32_t()> getSerializedSizeProvider(void* data) override {
        return [data]() { return static_cast<uint32_t>(static_cast<Raw*>(data)->bytes.size()); };
    }
    void* createData() override { return new Raw(); }
    void deleteData(void* data) override { delete static_cast<Raw*>(data); }
    bool getKey(void*, eprosima::fastrtps::rtps::InstanceHandle_t*, bool) override { return false; }
};

// Reliable, volatile, keep last 10 (a DataReaderQos or a DataWriterQos): the QoS of ROS 2
// services, and what a subscriber of a stock tool asks for.
template <class Qos>
void reliable_volatile_last10(Qos& qos) {
    qos.reliability().kind = eprosima::fastdds::dds::RELIABLE_RELIABILITY_QOS;
    qos.history().kind = eprosima::fastdds::dds::KEEP_LAST_HISTORY_QOS;
    qos.history().depth = 10;
    qos.durability().kind = eprosima::fastdds::dds::VOLATILE_DURABILITY_QOS;
}
